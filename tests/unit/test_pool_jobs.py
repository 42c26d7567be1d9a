"""A pool's job queue, pure and on a real SQLite file: the table of moves, which
pending job gets which idle worker, and that a busy worker is never drained."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadyserve.controller.job_tables import JobTable
from steadyserve.controller.pool import spare_busy
from steadyserve.core.jobs import (
    JOB_MOVES,
    IllegalJobMove,
    JobStatus,
    JobView,
    assign,
    busy_workers,
    check_job_move,
    ended_as,
)
from steadyserve.core.planner import Plan
from steadyserve.store import Store

J = JobStatus
ALLOWED = {
    (J.PENDING, J.STARTING),
    (J.PENDING, J.CANCELLED),
    (J.STARTING, J.RUNNING),
    (J.STARTING, J.FAILED),
    (J.STARTING, J.CANCELLING),
    (J.RUNNING, J.SUCCEEDED),
    (J.RUNNING, J.FAILED),
    (J.RUNNING, J.CANCELLING),
    (J.CANCELLING, J.CANCELLED),
    (J.CANCELLING, J.SUCCEEDED),
    (J.CANCELLING, J.FAILED),
}


@pytest.mark.parametrize("old", list(JobStatus))
@pytest.mark.parametrize("new", list(JobStatus))
def test_every_job_move_is_allowed_or_refused_by_the_table(old: JobStatus, new: JobStatus) -> None:
    if (old, new) in ALLOWED:
        check_job_move(old, new)
    else:
        with pytest.raises(IllegalJobMove):
            check_job_move(old, new)
    assert {(o, n) for o, moves in JOB_MOVES.items() for n in moves} == ALLOWED


def test_an_ended_job_moves_nowhere() -> None:
    for status in (J.SUCCEEDED, J.FAILED, J.CANCELLED):
        assert status.is_terminal and not JOB_MOVES[status]


def test_the_oldest_pending_jobs_go_to_the_idle_workers_one_each() -> None:
    jobs = [
        JobView(7, J.RUNNING, 1),
        JobView(9, J.PENDING),
        JobView(8, J.PENDING),
        JobView(6, J.SUCCEEDED, 2),  # ended: worker 2 is idle again
    ]
    assert assign(jobs, [2, 1]) == [(8, 2)]  # job 9 waits for the next idle worker
    assert assign(jobs, [1, 2, 3]) == [(8, 2), (9, 3)]
    assert assign(jobs, []) == []
    assert busy_workers(jobs) == {1}


def test_a_starting_or_cancelling_job_holds_its_worker() -> None:
    jobs = [JobView(1, J.STARTING, 1), JobView(2, J.CANCELLING, 2), JobView(3, J.PENDING)]
    assert assign(jobs, [1, 2]) == []


def test_how_a_job_ended() -> None:
    assert ended_as(0, cancelled=False) is J.SUCCEEDED
    assert ended_as(3, cancelled=False) is J.FAILED
    assert ended_as(-15, cancelled=True) is J.CANCELLED
    assert ended_as(0, cancelled=True) is J.CANCELLED


def test_a_scale_down_drains_an_idle_worker_instead_of_a_busy_one() -> None:
    plan = Plan(drain=((3, "scaled down to 2"),), routable=frozenset({1, 2}))
    assert spare_busy(plan, frozenset({3}), [1, 2]).drain == ((2, "scaled down to 2"),)


def test_a_busy_worker_stays_until_its_job_ends() -> None:
    """No idle worker to drain instead, or a version change: the busy one stays."""
    plan = Plan(drain=((3, "scaled down to 1"), (4, "version 1 is no longer wanted")))
    assert spare_busy(plan, frozenset({3, 4}), []).drain == ()
    assert spare_busy(plan, frozenset({4}), [1]).drain == ((3, "scaled down to 1"),)


def test_the_queue_is_a_table_of_the_state_database(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    table = JobTable(store)
    first = table.add("pool", "a", "echo a", {"K": "v"}, 10.0)
    second = table.add("pool", "b", "echo b", {}, 11.0)
    table.add("other", "c", "echo c", {}, 12.0)
    assert (first.id, second.id) == (1, 2) and first.status is J.PENDING
    table.move(first, J.STARTING, "given worker 1", worker=1)
    table.move(first, J.RUNNING, "running", pid=123, started_at=13.0)
    again = table.get(first.id)
    assert again is not None and (again.status, again.worker, again.pid) == (J.RUNNING, 1, 123)
    assert again.envs == {"K": "v"}
    with pytest.raises(IllegalJobMove):
        table.move(second, J.RUNNING, "skips STARTING")
    assert table.get(second.id).status is J.PENDING  # type: ignore[union-attr]
    assert [j.id for j in table.of_pool("pool", live=True)] == [1, 2]
    table.move(again, J.SUCCEEDED, "exited with code 0", exit_code=0, ended_at=14.0)
    assert [j.id for j in table.of_pool("pool", live=True)] == [2]
    assert [j.id for j in JobTable(Store(tmp_path / "state.db")).all()] == [1, 2, 3]
