"""A pool whose workers die, on simulated time (tests/helpers/fake_controller.py):
it never runs more workers than its size, a job whose worker is lost is
RECOVERING and runs again on another worker, and ``job_recovery`` limits how
often a job that failed by itself runs again.

The size is a promise about every moment, so it is checked after every tick of
random schedules (workers killed alone or with their job, as a preempted machine
takes its job with it; jobs ending), not only in one example."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_controller import World, run

from steadyserve.backends.fake import FakeReplica
from steadyserve.controller.pool_runtime import PoolRuntime
from steadyserve.core.jobs import JobRecovery, JobStatus
from steadyserve.core.states import ReplicaStatus

FIXED: dict[str, Any] = {"pool": {"workers": 2}, "setup": "echo ready"}
AUTOSCALED: dict[str, Any] = {
    "pool": {
        "min_workers": 1,
        "max_workers": 2,
        "upscale_delay_seconds": 0,
        "downscale_delay_seconds": 0,
    },
    "setup": "echo ready",
}
J = JobStatus


def _pool(world: World) -> PoolRuntime:
    rt = world.runtime
    assert isinstance(rt, PoolRuntime)
    return rt


def _running_workers(world: World) -> list[int]:
    """Workers with a process: live, or being stopped."""
    return [
        r.id
        for r in world.replicas()
        if r.status.is_live or r.status is ReplicaStatus.SHUTTING_DOWN
    ]


def _worker_process(world: World, worker_id: int) -> FakeReplica | None:
    held = world.runtime.held.get(worker_id)
    handle = held.handle if held is not None else None
    return handle if isinstance(handle, FakeReplica) else None


@pytest.mark.parametrize("fields", [FIXED, AUTOSCALED], ids=["fixed", "autoscaled"])
@pytest.mark.parametrize("seed", range(4))
def test_a_two_worker_pool_never_runs_more_than_two_while_workers_die(
    tmp_path: Path, seed: int, fields: dict[str, Any]
) -> None:
    world = World(tmp_path, fields)
    rt = _pool(world)
    table = rt.jobs.table
    rng = random.Random(seed)
    seen_max = 0

    async def scenario() -> None:
        nonlocal seen_max
        ids = [table.add("svc", f"j{i}", "true", {}, world.clock.wall()).id for i in range(8)]
        for _ in range(400):
            await world.advance(0.125)
            running = _running_workers(world)
            seen_max = max(seen_max, len(running))
            assert len(running) <= 2, (seed, world.describe())
            busy = [j for j in table.of_pool("svc", live=True) if j.status.holds_worker]
            assert len({j.worker for j in busy}) == len(busy)  # one job a worker
            roll = rng.random()
            ready = world.replicas(ReplicaStatus.READY)
            if roll < 0.08 and ready:
                worker = rng.choice(ready)
                process = _worker_process(world, worker.id)
                if process is not None:
                    process.exit(-9)
                    on_it = [j for j in busy if j.worker == worker.id and j.id in rt.jobs.handles]
                    if on_it and rng.random() < 0.5:  # preempted: the job dies with it
                        rt.jobs.handles[on_it[0].id].exit(-9)  # type: ignore[attr-defined]
            elif roll < 0.2:
                running_jobs = [j for j in busy if j.status is J.RUNNING]
                if running_jobs:
                    job = rng.choice(running_jobs)
                    rt.jobs.handles[job.id].exit(0)  # type: ignore[attr-defined]
        for job_id in ids:  # no more deaths: every job ends, none was lost
            await world.until(f"job {job_id} ended", lambda i=job_id: _end(rt, i), seconds=120)
        assert {table.get(i).status for i in ids} == {J.SUCCEEDED}  # type: ignore[union-attr]
        assert len(_running_workers(world)) <= 2

    def _end(rt: PoolRuntime, job_id: int) -> bool:
        job = rt.jobs.table.get(job_id)
        assert job is not None
        if job.status is J.RUNNING and job.id in rt.jobs.handles:
            rt.jobs.handles[job.id].exit(0)  # type: ignore[attr-defined]
        return job.status.is_terminal

    run(world, scenario)
    assert seen_max == 2


def test_a_job_whose_worker_dies_is_recovered_on_another(tmp_path: Path) -> None:
    """Its worker's process dies while the job runs on (they are separate
    processes here): the job is stopped, RECOVERING with the reason, then runs
    on the worker that replaced the lost one; the pool stays at 2 workers."""
    world = World(tmp_path, FIXED)
    rt = _pool(world)
    table = rt.jobs.table

    async def scenario() -> None:
        job_id = table.add("svc", "long", "true", {}, world.clock.wall()).id
        await world.until("it runs", lambda: table.get(job_id).status is J.RUNNING)  # type: ignore[union-attr]
        first = table.get(job_id)
        assert first is not None and first.worker is not None
        old_process = rt.jobs.handles[job_id]
        process = _worker_process(world, first.worker)
        assert process is not None
        process.exit(-9)
        await world.until(
            "it runs again",
            lambda: (
                (j := table.get(job_id)) is not None
                and j.status is J.RUNNING
                and j.worker != first.worker
            ),
        )
        again = table.get(job_id)
        assert again is not None and again.recoveries == 1 and again.restarts == 0
        assert old_process.exit_code() is not None  # its first process was stopped
        assert len(_running_workers(world)) == 2
        moves = [e.reason for e in rt.store.events("svc") if e.to_status == "JOB"]
        recovering = [m for m in moves if "RUNNING -> RECOVERING" in m]
        assert len(recovering) == 1, moves
        assert f"its worker {first.worker} is FAILED" in recovering[0]
        rt.jobs.handles[job_id].exit(0)  # type: ignore[attr-defined]
        await world.until("it ended", lambda: table.get(job_id).status is J.SUCCEEDED)  # type: ignore[union-attr]

    run(world, scenario)


def test_a_preempted_job_dies_with_its_worker_and_is_recovered(tmp_path: Path) -> None:
    """The worker and its job end together (-9, a machine preempted): not
    FAILED, RECOVERING, however many restarts job_recovery allows (none here)."""
    world = World(tmp_path, FIXED)
    rt = _pool(world)
    table = rt.jobs.table

    async def scenario() -> None:
        job_id = table.add("svc", "job", "true", {}, world.clock.wall()).id
        await world.until("it runs", lambda: table.get(job_id).status is J.RUNNING)  # type: ignore[union-attr]
        job = table.get(job_id)
        assert job is not None and job.worker is not None
        process = _worker_process(world, job.worker)
        assert process is not None
        process.exit(-9)
        rt.jobs.handles[job_id].exit(-9)  # type: ignore[attr-defined]
        await world.until("it runs again", lambda: table.get(job_id).recoveries == 1)  # type: ignore[union-attr]
        await world.until("RUNNING", lambda: table.get(job_id).status is J.RUNNING)  # type: ignore[union-attr]

    run(world, scenario)


def test_max_restarts_on_errors_is_honoured(tmp_path: Path) -> None:
    """SkyPilot's max_restarts_on_errors: 2 restarts of a job that keeps failing,
    then FAILED with its code; a job without job_recovery fails the first time."""
    world = World(tmp_path, FIXED)
    rt = _pool(world)
    table = rt.jobs.table

    async def scenario() -> None:
        now = world.clock.wall()
        job_id = table.add("svc", "flaky", "true", {}, now, JobRecovery(2)).id
        plain = table.add("svc", "plain", "true", {}, now).id
        for attempt in range(3):
            await world.until(
                f"attempt {attempt + 1} runs",
                lambda n=attempt: (
                    (j := table.get(job_id)) is not None
                    and j.status is J.RUNNING
                    and j.id in rt.jobs.handles
                    and j.recoveries == n
                ),
            )
            rt.jobs.handles[job_id].exit(3)  # type: ignore[attr-defined]
        await world.until("it failed", lambda: table.get(job_id).status is J.FAILED)  # type: ignore[union-attr]
        ended = table.get(job_id)
        assert ended is not None and (ended.exit_code, ended.restarts) == (
            3,
            3,
        )  # the refused one counted too
        await world.until("plain runs", lambda: plain in rt.jobs.handles)
        rt.jobs.handles[plain].exit(3)  # type: ignore[attr-defined]
        await world.until("plain failed", lambda: table.get(plain).status is J.FAILED)  # type: ignore[union-attr]
        assert table.get(plain).recoveries == 0  # type: ignore[union-attr]

    run(world, scenario)


def test_a_pool_whose_setup_fails_is_failed_with_the_reason(tmp_path: Path) -> None:
    """Its only worker's setup exits 5 before it was ever ready: the version is
    broken, the pool FAILED, and ``failure`` (what refuses jobs) says why."""
    world = World(tmp_path, {"pool": {"workers": 1}, "setup": "exit 5"})
    world.backend.workers_finish_setup = False
    rt = _pool(world)

    async def scenario() -> None:
        await world.until("a worker started", lambda: bool(world.replicas(ReplicaStatus.STARTING)))
        assert rt.jobs.failure() is None
        (worker,) = world.replicas(ReplicaStatus.STARTING)
        process = _worker_process(world, worker.id)
        assert process is not None
        process.exit(5)
        await world.until("the pool FAILED", lambda: rt.jobs.failure() is not None)
        failure = rt.jobs.failure()
        assert failure is not None
        assert failure.startswith("version 1 failed before any worker was ready: ")
        assert "process exited with code 5 before it was ready" in failure

    run(world, scenario)
