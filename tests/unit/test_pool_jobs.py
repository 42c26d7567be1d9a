"""A pool's job queue, pure and on a real SQLite file: the table of moves, which
waiting job gets which idle worker, what becomes of a job whose process ended
(SkyPilot's job_recovery), and that a busy worker is never drained."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller.job_tables import JobTable
from steadyserve.controller.pool import spare_busy
from steadyserve.core.jobs import (
    JOB_MOVES,
    IllegalJobMove,
    JobRecovery,
    JobStatus,
    JobView,
    after_exit,
    assign,
    busy_workers,
    check_job_move,
)
from steadyserve.core.planner import Plan
from steadyserve.store import Store
from steadyserve.wire.replica_contract import WORKER_READY_LINE, worker_ready

J = JobStatus
ALLOWED = {
    (J.PENDING, J.STARTING),
    (J.PENDING, J.CANCELLED),
    (J.STARTING, J.RUNNING),
    (J.STARTING, J.FAILED),
    (J.STARTING, J.CANCELLING),
    (J.STARTING, J.RECOVERING),
    (J.RUNNING, J.SUCCEEDED),
    (J.RUNNING, J.FAILED),
    (J.RUNNING, J.CANCELLING),
    (J.RUNNING, J.RECOVERING),
    (J.RECOVERING, J.STARTING),
    (J.RECOVERING, J.CANCELLED),
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


def test_a_recovering_job_goes_first_then_the_oldest_pending() -> None:
    jobs = [JobView(3, J.PENDING), JobView(5, J.RECOVERING), JobView(4, J.PENDING)]
    assert assign(jobs, [1, 2]) == [(5, 1), (3, 2)]


NONE = JobRecovery()


def _after(
    code: int | None,
    *,
    cancelled: bool = False,
    lost: str | None = None,
    recovery: JobRecovery = NONE,
    restarts: int = 0,
) -> tuple[JobStatus, int]:
    """The job's next state and its count of failures after it."""
    out = after_exit(
        code, cancelled=cancelled, worker_lost=lost, recovery=recovery, restarts=restarts
    )
    return out.status, out.restarts


def test_how_a_job_ended() -> None:
    assert _after(0) == (J.SUCCEEDED, 0)
    assert _after(3) == (J.FAILED, 1)  # no job_recovery: a failure is final, and counted
    assert _after(None) == (J.FAILED, 1)  # it left no code, its worker alive
    assert _after(-15, cancelled=True) == (J.CANCELLED, 0)
    assert _after(0, cancelled=True) == (J.CANCELLED, 0)
    assert _after(-15, cancelled=True, lost="worker 1 is FAILED") == (J.CANCELLED, 0)


def test_a_lost_worker_is_recovered_however_often_and_uncounted() -> None:
    """SkyPilot recovers a preempted job whatever max_restarts_on_errors says."""
    for restarts in (0, 5, 1000):
        assert _after(-9, lost="its worker 2 is FAILED", restarts=restarts) == (
            J.RECOVERING,
            restarts,
        )
    assert _after(None, lost="its worker 2 is gone") == (J.RECOVERING, 0)
    assert _after(0, lost="its worker 2 is gone") == (J.SUCCEEDED, 0)  # it finished


def test_max_restarts_on_errors_counts_the_failures() -> None:
    """The worked example of ``after_exit``: 2 restarts, then FAILED; the refused
    third restart is counted too, as SkyPilot's ``restart_cnt_on_failure`` is."""
    two = JobRecovery(max_restarts_on_errors=2)
    assert _after(3, recovery=two, restarts=0) == (J.RECOVERING, 1)
    assert _after(3, recovery=two, restarts=1) == (J.RECOVERING, 2)
    assert _after(3, recovery=two, restarts=2) == (J.FAILED, 3)
    ended = after_exit(3, cancelled=False, worker_lost=None, recovery=two, restarts=2)
    assert ended.reason == "exited with code 3 after 2 restarts (max_restarts_on_errors)"
    assert _after(0, recovery=two, restarts=2) == (J.SUCCEEDED, 2)


def test_recover_on_exit_codes_restart_uncounted() -> None:
    codes = JobRecovery(max_restarts_on_errors=1, recover_on_exit_codes=frozenset({33}))
    assert _after(33, recovery=codes, restarts=1) == (J.RECOVERING, 1)
    assert _after(34, recovery=codes, restarts=0) == (J.RECOVERING, 1)
    assert _after(34, recovery=codes, restarts=1) == (J.FAILED, 2)


def test_restarts_never_exceed_the_limit_and_the_count_is_every_failure() -> None:
    """Any run of exit codes against any job_recovery: the job runs at most
    max_restarts_on_errors + (matching codes) times again, and the count is the
    number of failures whose code matched none, as SkyPilot counts them."""
    codes = st.lists(st.integers(1, 6), max_size=12)

    @given(codes, st.integers(0, 4), st.frozensets(st.integers(1, 6), max_size=3))
    def check(exits: list[int], limit: int, recover: frozenset[int]) -> None:
        recovery = JobRecovery(limit, recover)
        count = counted_restarts = 0
        for code in exits:
            status, after = _after(code, recovery=recovery, restarts=count)
            unmatched = code not in recover
            assert after == count + unmatched
            if status is J.FAILED:
                assert unmatched and after == limit + 1
                break
            assert status is J.RECOVERING
            counted_restarts += unmatched
            count = after
        assert counted_restarts <= limit

    check()


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
    kinds = [e.reason for e in store.events("pool") if e.to_status == "JOB"]
    assert kinds == [
        "job 1 PENDING -> STARTING: given worker 1",
        "job 1 STARTING -> RUNNING: running",
        "job 1 RUNNING -> SUCCEEDED: exited with code 0",
    ]  # every move is an event of its pool, with its reason


def test_a_queue_made_before_recovery_gets_its_columns(tmp_path: Path) -> None:
    """A state file from before job_recovery: opened, its jobs keep their rows."""
    store = Store(tmp_path / "state.db")
    store.execute(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, pool TEXT NOT NULL,"
        " name TEXT NOT NULL, status TEXT NOT NULL, run TEXT NOT NULL,"
        " envs TEXT NOT NULL DEFAULT '{}', worker INTEGER, pid INTEGER, pid_create_time REAL,"
        " exit_code INTEGER, reason TEXT NOT NULL DEFAULT '', submitted_at REAL NOT NULL,"
        " started_at REAL, ended_at REAL)"
    )
    store.execute(
        "INSERT INTO jobs (pool, name, status, run, submitted_at) VALUES ('p', 'a', 'PENDING',"
        " 'true', 1.0)"
    )
    old = JobTable(store).get(1)
    assert old is not None and (old.recovery, old.restarts, old.recoveries) == (NONE, 0, 0)
    two = JobRecovery(2, frozenset({7}))
    assert JobTable(store).add("p", "b", "true", {}, 2.0, two).recovery == two


def test_a_workers_ready_line_is_found_however_the_log_is_read(tmp_path: Path) -> None:
    """Read in any pieces as it grows, the ready line is found once it is whole
    and a line of its own, and not before; output after it (a daemon setup
    started) is no matter."""
    line = WORKER_READY_LINE + "\n"
    log = tmp_path / "1.log"
    for text in ("", "setup out\n", "x" * 70 + "\n"):
        whole = (text + line + "daemon says hi\n").encode()
        boundary = len(text) + len(line)
        for cut in range(len(whole) + 1):  # one look at the whole file so far
            log.write_bytes(whole[:cut])
            assert worker_ready(log, 0)[0] == (cut >= boundary), (text, cut)
        for step in (1, 5, 13):  # looks as it grows, each from where the last ended
            offset, found = 0, False
            for end in range(0, len(whole) + 1, step):
                log.write_bytes(whole[:end])
                seen, offset = worker_ready(log, offset)
                found = found or seen
                assert found == (end >= boundary), (text, end, step)
    # Rotated (copy-and-truncate) between two looks: the line is in the copy, or
    # written after the truncation; either way it is found.
    setup = b"x" * 100 + b"\n"
    for before_rotation in (True, False):
        log.write_bytes(setup)
        seen, offset = worker_ready(log, 0)
        assert (seen, offset) == (False, len(setup))
        copy = setup + (line.encode() if before_rotation else b"more setup\n")
        (tmp_path / "1.log.1").write_bytes(copy)
        log.write_bytes(b"" if before_rotation else line.encode())
        assert worker_ready(log, offset)[0] is True, before_rotation
    log.write_bytes(b"echo " + WORKER_READY_LINE.encode() + b" in a line\n")
    assert worker_ready(log, 0)[0] is False  # not a line of its own
    assert worker_ready(tmp_path / "missing.log", 5) == (False, 5)
