"""SkyPilot's own unit tests of how a cancelled job ends, ported.

Source: repository skypilot-org/skypilot, path
tests/unit_tests/test_sky/jobs/test_finalize_job_done.py, commit
df051f0521fa818798dd8e9296c4c9f0e1304570. The cases whose subject has a
counterpart here, with their inputs and expected values as written; only the
call surface is translated. They run on a pool's real runtime, jobs table and
scheduler on simulated time (tests/helpers/fake_controller.py: the fake backend,
so a job's process is a record the test ends; a stop ends it with 0):

- SkyPilot seeds a task row in a state; here the job gets there as jobs do: a
  CANCELLING job is a RUNNING one that ``steady jobs cancel`` asked to stop
  (``PoolJobs.cancel``), a PENDING one waits for its pool's first worker, an
  ended one (SUCCEEDED or CANCELLED, ``end_at`` 1234.5) is moved there by the
  jobs table's own moves;
- ``state.finalize_job_done_async(job_id, cancelling=...)``, the controller's
  last write for a job, is the pool's scheduler step here (``PoolJobs.tick``,
  which reaps a stopped job's process and ends it as ``after_exit`` says); "called
  again" is the pool ticking on; ``state.set_pending_cancelled(job_id)`` is
  ``PoolJobs.cancel`` of a waiting job, which ends it at once;
- a task row's ``(status, end_at)`` is the job's ``(status, ended_at)``; its
  events (``state.get_job_events``) are the job's moves among the pool's events
  (``job N OLD -> NEW: why``), counted from where SkyPilot's seed leaves the job.

Left out of the ported cases: the ``schedule_state`` (DONE, WAITING, ...) and the
status callback, which have no counterpart (a job here is done when its state
is; no user command runs on its moves). Not ported: test_abnormal_exit_failed_controller
and test_recovering_job_stamps_last_recovered_at (SkyPilot's FAILED_CONTROLLER,
when the job's controller process exits with the job not ended: a controller
here takes its jobs' processes back when it restarts), test_pipeline_earlier_tasks_untouched
and test_partially_pending_pipeline_rolled_back (jobs of several tasks),
test_inactive_job_cancelled_keeps_schedule_state, test_claimed_job_untouched and
test_waiting_job_with_non_pending_task_rolled_back (a PENDING task whose job's
schedule state is INACTIVE or LAUNCHING, or a RUNNING one whose job waits: the
two columns SkyPilot keeps apart are one state here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steadyserve.controller.pool_runtime import PoolRuntime
from steadyserve.core.jobs import JobStatus
from tests.helpers.fake_controller import World, run

POOL: dict[str, Any] = {"pool": {"workers": 1}, "setup": "echo ready"}


def _pool(world: World) -> PoolRuntime:
    rt = world.runtime
    assert isinstance(rt, PoolRuntime)
    return rt


def _task_rows(rt: PoolRuntime, job_id: int) -> list[tuple[JobStatus, float | None]]:
    job = rt.jobs.table.get(job_id)
    assert job is not None
    return [(job.status, job.ended_at)]


def _event_statuses(world: World, job_id: int) -> list[JobStatus]:
    """The states the job's moves went to, oldest first."""
    moves = [e for e in world.events("JOB") if e.startswith(f"job {job_id} ")]
    return [JobStatus(m.split(" -> ")[1].split(":")[0]) for m in moves]


async def _running(world: World, rt: PoolRuntime) -> int:
    job_id = rt.jobs.table.add("svc", "job", "true", {}, world.clock.wall()).id
    await world.until(
        "it runs",
        lambda: (
            (j := rt.jobs.table.get(job_id)) is not None
            and j.status is JobStatus.RUNNING
            and job_id in rt.jobs.handles
        ),
    )
    return job_id


def _ended(rt: PoolRuntime, status: JobStatus, end_at: float) -> int:
    """A job already ended with ``end_at``, as SkyPilot seeds one."""
    table = rt.jobs.table
    job = table.add("svc", "job", "true", {}, 1000.0)
    if status is JobStatus.SUCCEEDED:
        table.move(job, JobStatus.STARTING, "given worker 1", worker=1)
        table.move(job, JobStatus.RUNNING, "running on worker 1", started_at=1000.0)
        table.move(job, status, "exited with code 0", exit_code=0, ended_at=end_at)
    else:
        table.move(job, status, "cancelled before it ran", ended_at=end_at)
    return job.id


class TestFinalizeJobDone:
    def test_cancelling_job_finalized(self, tmp_path: Path) -> None:
        world = World(tmp_path, POOL)
        rt = _pool(world)

        async def scenario() -> None:
            job_id = await _running(world, rt)
            rt.jobs.cancel(job_id)
            assert _task_rows(rt, job_id) == [(JobStatus.CANCELLING, None)]
            seeded = len(_event_statuses(world, job_id))

            await world.advance(1.0)  # the controller's finalize: the pool's ticks

            ((status, end_at),) = _task_rows(rt, job_id)
            assert status == JobStatus.CANCELLED
            assert end_at is not None
            assert _event_statuses(world, job_id)[seeded:] == [JobStatus.CANCELLED]

        run(world, scenario)

    def test_already_terminal_only_marks_done(self, tmp_path: Path) -> None:
        world = World(tmp_path, POOL)
        rt = _pool(world)
        end_at = 1234.5
        job_id = _ended(rt, JobStatus.SUCCEEDED, end_at)
        seeded = len(_event_statuses(world, job_id))

        async def scenario() -> None:
            await world.advance(1.0)

            assert _task_rows(rt, job_id) == [(JobStatus.SUCCEEDED, end_at)]
            # No transition happened, so no event either.
            assert _event_statuses(world, job_id)[seeded:] == []

        run(world, scenario)

    def test_cancelling_flag_with_terminal_job_is_noop(self, tmp_path: Path) -> None:
        world = World(tmp_path, POOL)
        rt = _pool(world)
        end_at = 1234.5
        job_id = _ended(rt, JobStatus.CANCELLED, end_at)
        seeded = len(_event_statuses(world, job_id))

        async def scenario() -> None:
            await world.advance(1.0)

            assert _task_rows(rt, job_id) == [(JobStatus.CANCELLED, end_at)]
            assert _event_statuses(world, job_id)[seeded:] == []

        run(world, scenario)

    def test_idempotent_second_call(self, tmp_path: Path) -> None:
        world = World(tmp_path, POOL)
        rt = _pool(world)

        async def scenario() -> None:
            job_id = await _running(world, rt)
            rt.jobs.cancel(job_id)
            seeded = len(_event_statuses(world, job_id))

            await world.advance(1.0)
            rows_after_first = _task_rows(rt, job_id)
            await world.advance(1.0)

            assert _task_rows(rt, job_id) == rows_after_first
            assert _event_statuses(world, job_id)[seeded:] == [JobStatus.CANCELLED]

        run(world, scenario)


class TestSetPendingCancelled:
    def test_waiting_job_cancelled_and_done(self, tmp_path: Path) -> None:
        world = World(tmp_path, POOL)
        rt = _pool(world)

        async def scenario() -> None:
            # PENDING: its pool has no worker ready yet (no tick has run).
            job_id = rt.jobs.table.add("svc", "job", "true", {}, world.clock.wall()).id
            assert _task_rows(rt, job_id) == [(JobStatus.PENDING, None)]

            assert rt.jobs.cancel(job_id)

            ((status, end_at),) = _task_rows(rt, job_id)
            assert status == JobStatus.CANCELLED
            assert end_at is not None
            assert _event_statuses(world, job_id) == [JobStatus.CANCELLED]
            await world.advance(1.0)  # and it never runs
            assert _task_rows(rt, job_id) == [(JobStatus.CANCELLED, end_at)]

        run(world, scenario)
