"""SkyPilot's own unit test that an ended job takes no further state, ported.

Source: repository skypilot-org/skypilot, path
tests/unit_tests/test_sky/jobs/test_sync_status_setters.py, commit
3571fcd58f908740d5a7f74cfa614766a29baebe. Ported: test_terminal_task_rejects_transition,
its five transitions with their inputs and expected outcome as written; only the
call surface is translated:

- the seeded task (SUCCEEDED, ``end_at`` 150.0, ``recovery_count`` 2) is a job of a
  real jobs table (``JobTable`` on a ``Store``) moved there through the table's
  own moves (``ended_at`` 150.0, ``recoveries`` 2; SkyPilot's ``last_recovered_at``
  and ``job_duration`` have no column here);
- SkyPilot's setter ``set_<transition>`` writes one state; here it is the table's
  one way to change a job's state, ``JobTable.move``, to that state: ``starting``
  STARTING, ``started`` RUNNING (``start_time`` as ``started_at``), ``recovering``
  RECOVERING, ``recovered`` RUNNING again (``recovered_time`` as ``started_at``),
  ``succeeded`` SUCCEEDED (``end_time`` as ``ended_at``); the arguments with no
  column here (``run_timestamp``, ``submit_time``, ``resources_str``, ``specs``,
  ``force_transit_to_recovering``) are left out;
- SkyPilot's ``ManagedJobStatusError`` is ``IllegalJobMove`` (core/jobs.py: an
  ended job has no move in ``JOB_MOVES``); its snapshot of the row and its
  events is the job's record and the pool's events, and "the callback was not
  called" is "no event was written" (an event is what a move announces here).

SkyPilot seeds the same job twice and checks the synchronous setter against its
asynchronous twin; a job's state has one writer here, so the job is seeded once.
Not ported: test_sync_async_parity (the twins' parity), test_sync_commit_lost_retry
and test_runtime_observation_commit_lost_counts_once (SQLAlchemy's commit retried
after a lost connection), test_runtime_observation_parity_and_replay (SkyPilot's
runtime observations of a cluster's job).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steadyserve.controller.job_tables import JobTable
from steadyserve.core.jobs import IllegalJobMove, JobStatus
from steadyserve.store import Store

POOL = "pool"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Store, JobTable]]:
    store = Store(tmp_path / "jobs.db")
    yield store, JobTable(store)
    store.close()


def seed(table: JobTable, status: JobStatus, **values: Any) -> int:
    assert status is JobStatus.SUCCEEDED
    job = table.add(POOL, "task", "true", {}, 100.0)
    table.move(job, JobStatus.STARTING, "given worker 1", worker=1)
    table.move(job, JobStatus.RUNNING, "running on worker 1", started_at=100.0)
    table.move(job, status, "exited with code 0", exit_code=0, recoveries=2, **values)
    return job.id


def snapshot(store: Store, table: JobTable, job_id: int) -> tuple[Any, list[Any]]:
    job = table.get(job_id)
    assert job is not None
    return job.to_json(), [(e.to_status, e.reason) for e in store.events(POOL)]


STATES = {
    "starting": JobStatus.STARTING,
    "started": JobStatus.RUNNING,
    "recovering": JobStatus.RECOVERING,
    "recovered": JobStatus.RUNNING,
    "succeeded": JobStatus.SUCCEEDED,
}
COLUMNS = {"start_time": "started_at", "recovered_time": "started_at", "end_time": "ended_at"}
"""SkyPilot's arguments that have a column here; the others are left out."""


def set_transition(table: JobTable, job_id: int, transition: str, **kwargs: Any) -> None:
    """SkyPilot's ``state.set_<transition>(job_id, 0, callback_func=..., **kwargs)``."""
    job = table.get(job_id)
    assert job is not None
    values = {COLUMNS[k]: v for k, v in kwargs.items() if k in COLUMNS}
    table.move(job, STATES[transition], f"set_{transition}", **values)


@pytest.mark.parametrize(
    "transition,kwargs",
    [
        (
            "starting",
            dict(run_timestamp="run", submit_time=110.0, resources_str="1x[CPU:1]", specs={}),
        ),
        ("started", dict(start_time=120.0)),
        ("recovering", dict(force_transit_to_recovering=False)),
        ("recovered", dict(recovered_time=200.0)),
        ("succeeded", dict(end_time=200.0)),
    ],
)
def test_terminal_task_rejects_transition(
    db: tuple[Store, JobTable], transition: str, kwargs: dict[str, Any]
) -> None:
    store, table = db
    job_id = seed(table, JobStatus.SUCCEEDED, ended_at=150.0)
    before = snapshot(store, table, job_id)
    with pytest.raises(IllegalJobMove):
        set_transition(table, job_id, transition, **kwargs)
    assert snapshot(store, table, job_id) == before
    ended = table.get(job_id)
    assert ended is not None and (ended.status, ended.ended_at) == (JobStatus.SUCCEEDED, 150.0)
