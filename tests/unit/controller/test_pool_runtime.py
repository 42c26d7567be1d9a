"""A pool's runtime against the fake backend on simulated time: workers are READY
without a probe, the queue sizes the pool, each idle worker takes the oldest
pending job, an exit ends a job, and a scale-down stops an idle worker, never
the busy newest one (tests/helpers/fake_controller.py: no processes, no sleeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import World, run

from steadyserve.controller.pool_runtime import PoolRuntime
from steadyserve.core.jobs import JobStatus
from steadyserve.core.states import ReplicaStatus, UpdateMode, UpdateStatus

FIELDS: dict[str, Any] = {
    "pool": {
        "min_workers": 0,
        "max_workers": 2,
        "upscale_delay_seconds": 0,
        "downscale_delay_seconds": 0,
    },
    "setup": "echo ready",
}
READY = ReplicaStatus.READY


def test_the_queue_sizes_the_pool_and_busy_workers_stay(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)
    rt = world.runtime
    assert isinstance(rt, PoolRuntime)
    table = rt.jobs.table

    def status(job_id: int) -> JobStatus:
        job = table.get(job_id)
        assert job is not None
        return job.status

    def worker_of(job_id: int) -> int | None:
        job = table.get(job_id)
        return job.worker if job is not None else None

    async def scenario() -> None:
        await world.tick(3)
        assert world.replicas() == []  # no job, no worker: min_workers is 0
        ids = [table.add("svc", f"j{i}", "true", {}, world.clock.wall()).id for i in range(3)]
        await world.until(
            "2 jobs running", lambda: [status(i) for i in ids].count(JobStatus.RUNNING) == 2
        )
        assert [r.id for r in world.replicas(READY)] == [1, 2]  # the ceiling: max_workers
        assert status(ids[2]) is JobStatus.PENDING
        assert world.lb.supervised == 0  # a pool has no load balancer
        first_on = {worker_of(ids[0]), worker_of(ids[1])}
        assert first_on == {1, 2}
        on_two = ids[0] if worker_of(ids[0]) == 2 else ids[1]
        on_one = ids[1] if on_two == ids[0] else ids[0]
        rt.jobs.handles[on_two].exit(3)  # type: ignore[attr-defined]
        await world.until("the third job on worker 2", lambda: worker_of(ids[2]) == 2)
        assert status(on_two) is JobStatus.FAILED
        await world.until("it runs", lambda: status(ids[2]) is JobStatus.RUNNING)
        rt.jobs.handles[on_one].exit(0)  # type: ignore[attr-defined]
        # The queue is empty and one job runs: one worker is wanted, and the newest
        # (worker 2) holds that job, so worker 1 goes.
        await world.until("worker 1 gone", lambda: [r.id for r in world.replicas(READY)] == [2])
        assert status(on_one) is JobStatus.SUCCEEDED
        assert status(ids[2]) is JobStatus.RUNNING
        rt.jobs.handles[ids[2]].exit(0)  # type: ignore[attr-defined]
        await world.until("no worker", lambda: world.replicas(READY) == [])
        assert [status(i) for i in ids].count(JobStatus.SUCCEEDED) == 2

    run(world, scenario)


def test_an_update_replaces_a_busy_worker_once_its_job_ended(tmp_path: Path) -> None:
    """A new setup makes a new version: its worker starts at once and takes the
    next job; the old worker keeps its job running and goes when it ends."""
    fixed = {"pool": {"workers": 1}, "setup": "echo v1", "service": {"update_deadline_s": 600}}
    world = World(tmp_path, fixed)
    rt = world.runtime
    assert isinstance(rt, PoolRuntime)
    table = rt.jobs.table

    def job(job_id: int) -> Any:
        return table.get(job_id)

    async def scenario() -> None:
        first = table.add("svc", "long", "true", {}, world.clock.wall()).id
        await world.until("the job running", lambda: job(first).status is JobStatus.RUNNING)
        spec = world.add_version(2, {**fixed, "setup": "echo v2"})
        rt.rollout.begin(2, spec, UpdateMode.ROLLING, "setup changed")
        second = table.add("svc", "next", "true", {}, world.clock.wall()).id
        await world.until("the next job running", lambda: job(second).status is JobStatus.RUNNING)
        assert (job(first).worker, job(second).worker) == (1, 2)
        await world.advance(60)
        assert [(r.id, r.version) for r in world.replicas(READY)] == [(1, 1), (2, 2)]
        assert job(first).status is JobStatus.RUNNING  # never stopped by the update
        rt.jobs.handles[first].exit(0)  # type: ignore[attr-defined]
        await world.until("the old worker gone", lambda: len(world.replicas(READY)) == 1)
        assert job(first).status is JobStatus.SUCCEEDED
        update = rt.rollout.update
        assert update is not None
        await world.until(
            "the update done",
            lambda: rt.store.latest_update("svc").status is UpdateStatus.SUCCEEDED,  # type: ignore[union-attr]
        )
        await world.until(
            "the old worker forgotten",
            lambda: [(r.id, r.version) for r in world.replicas()] == [(2, 2)],
        )

    run(world, scenario)
