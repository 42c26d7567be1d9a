"""A pool's jobs, carried out: the scheduler step of a pool's reconcile tick.

A pool (``service.pool``, docs/pools.md) is a service whose replicas are
workers: each ran the version's ``setup`` and holds its environment, with no
load balancer and no endpoint. On every tick of the pool's runtime
(controller/runtime.py) this module reaps the jobs whose process exited, stops
those ``steady jobs cancel`` asked to stop, and gives each idle ready worker the
oldest pending job (core/jobs.py). A job's ``run`` starts through the backend as
a replica of the worker's version does: in that version's workdir copy and
environment (``setup``'s results, its virtualenv), with the worker's variables
and isolation, plus the job's own ``envs`` and ids, logging to its own file.
The pool's size follows SkyPilot's queue-length rule (core/autoscale/queue.py),
never taking away a worker that holds a job, and never counting a lost one: a
job whose worker failed is stopped and RECOVERING (core/jobs.py, ``after_exit``),
so the failed worker holds nothing and its replacement keeps the pool at its size.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steadyserve.backends.base import AdoptRequest, LaunchRequest, ReplicaHandle
from steadyserve.controller.job_env import job_env
from steadyserve.controller.job_tables import JobRow, JobTable
from steadyserve.core.autoscale import queue
from steadyserve.core.jobs import JobStatus, JobView, after_exit, assign, busy_workers
from steadyserve.core.planner import Plan, is_scale_down
from steadyserve.core.states import EventKind, ReplicaStatus, ServiceStatus
from steadyserve.envs.plan import built_setup
from steadyserve.home.paths import Home
from steadyserve.oneline import one_line
from steadyserve.spec.pool import PoolPolicy
from steadyserve.spec.ports import isolated
from steadyserve.wire import replica_contract as contract

if TYPE_CHECKING:
    from steadyserve.controller.runtime import ServiceRuntime

log = logging.getLogger("steadyserve.controller")

JOB_ID_BASE = 1_000_000
"""A job's process gets replica id ``JOB_ID_BASE + job id`` at the backend, so its
tag, cgroup and network namespace are its own, never its worker's."""
STOP_TIMEOUT_S = 5.0


def job_log(home: Home, job_id: int) -> Path:
    """A job's log: under the home, not the pool, so it outlives ``pool down``."""
    return home.root / "jobs" / f"{job_id}.log"


def exit_file(home: Home, job_id: int) -> Path:
    """Where a job's process leaves its exit code: a controller restarted while
    it ran holds it again by pid, and a process that is not its child tells no code."""
    return home.root / "jobs" / f"{job_id}.exit"


_RECORDS_EXIT = 'bash -c "$1"; code=$?; echo "$code" > "$2"; exit "$code"'
"""The job's ``run`` under bash, its exit code written where :func:`exit_file` says."""


def recorded_exit(home: Home, job_id: int) -> int | None:
    try:
        return int(exit_file(home, job_id).read_text().strip())
    except (OSError, ValueError):
        return None


def recorded_end(home: Home, job_id: int) -> float | None:
    """When the job's process wrote its exit code: its end, even when no
    controller ran to see it."""
    try:
        return exit_file(home, job_id).stat().st_mtime
    except OSError:
        return None


def queue_policy(pool: PoolPolicy) -> queue.QueuePolicy:
    return queue.QueuePolicy(
        floor=pool.floor,
        ceiling=pool.ceiling,
        threshold=pool.threshold,
        upscale_delay_s=pool.upscale_delay_s,
        downscale_delay_s=pool.downscale_delay_s,
    )


def spare_busy(plan: Plan, busy: frozenset[int], idle: Iterable[int]) -> Plan:
    """The plan with no busy worker drained for a scale-down: an idle one of the
    same version goes instead when there is one, else the busy one stays until
    its job ends (a later tick drains it). A version change drains a worker
    only once its job ended, too: a job is never killed by a resize or an update."""
    spare = [w for w in idle if w not in {rid for rid, _ in plan.drain}]
    drain: list[tuple[int, str]] = []
    for rid, why in plan.drain:
        if rid not in busy:
            drain.append((rid, why))
        elif is_scale_down(why) and spare:
            drain.append((spare.pop(), why))
    return replace(plan, drain=tuple(drain))


class PoolJobs:
    """One pool's queue, its scheduler and its size."""

    def __init__(self, rt: ServiceRuntime, table: JobTable) -> None:
        self.rt = rt
        self.table = table
        self.handles: dict[int, ReplicaHandle] = {}
        """Job id -> its process, from its launch until its exit is recorded."""
        self.starting: set[int] = set()
        """Jobs whose process is being launched (no handle yet)."""
        self.stopping: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.scale = queue.start(queue_policy(self.pool))
        self._readopt()

    # size -----------------------------------------------------------------
    @property
    def pool(self) -> PoolPolicy:
        pool = self.rt.spec.service.pool
        assert pool is not None, "a pool's spec always has its pool section"
        return pool

    def views(self) -> list[JobView]:
        live = self.table.of_pool(self.rt.name, live=True)
        return [JobView(j.id, j.status, j.worker) for j in live]

    def target(self) -> int:
        """Workers the pool aims for: the queue rule's, and never fewer than live busy
        ones of the current version (an old version's busy worker is kept apart,
        by :func:`spare_busy`, until its job ends: it is no part of the new size).
        A failed worker is never counted: its job is recovered elsewhere, and
        counting it would launch one worker more for each one lost."""
        version = self.rt.row.version
        busy = busy_workers(self.views())
        current = [
            w
            for w in busy
            if (r := self.rt.replicas.get(w)) and r.version == version and r.status.is_live
        ]
        return max(self.scale.target, len(current))

    def autoscale(self, now: float) -> None:
        pending = sum(1 for j in self.views() if j.status.waits)
        before = self.scale.target
        self.scale = queue.step(queue_policy(self.pool), self.scale, pending, now)
        if self.scale.target != before:
            why = f"pool target {before} -> {self.scale.target} workers ({pending} jobs pending)"
            self.rt.store.add_event(self.rt.name, None, None, EventKind.AUTOSCALE, why)

    def protect(self, plan: Plan) -> Plan:
        busy = busy_workers(self.views())
        idle = [rid for rid in self._ready_workers(plan) if rid not in busy]
        return spare_busy(plan, busy, idle)

    def _ready_workers(self, plan: Plan) -> list[int]:
        """READY workers of the target version that the plan keeps."""
        return sorted(
            r.id
            for r in self.rt.replicas.values()
            if r.status is ReplicaStatus.READY
            and r.version == self.rt.row.version
            and r.id in plan.routable
        )

    # the scheduler step ------------------------------------------------------
    def tick(self, plan: Plan) -> None:
        """Reap, recover the jobs of lost workers, stop what was cancelled, then start
        waiting jobs on idle workers."""
        live = self.table.of_pool(self.rt.name, live=True)
        for job in live:
            self._reap(job)
        for job in live:
            if job.status is JobStatus.RUNNING and job.worker is not None:
                lost = self.worker_lost(job.worker)
                if lost is not None:
                    self._recover(job, lost)
        for job in live:
            if job.status is JobStatus.CANCELLING and job.id not in self.stopping:
                self._stop(job)
        draining = {rid for rid, _ in plan.drain}
        ready = [w for w in self._ready_workers(plan) if w not in draining]
        # A recovering job whose old process is still being stopped waits for it
        # (a cancelled one being stopped still holds its worker).
        views = [
            JobView(j.id, j.status, j.worker)
            for j in live
            if not (j.status.waits and j.id in self.stopping)
        ]
        by_id = {j.id: j for j in live}
        for job_id, worker in assign(views, ready):
            job = by_id[job_id]
            self.table.move(job, JobStatus.STARTING, f"given worker {worker}", worker=worker)
            self.starting.add(job.id)
            self._spawn(self._start(job.id, worker))

    def worker_lost(self, worker_id: int) -> str | None:
        """Why the worker can no longer hold a job (failed, gone, its process
        exited), or None while it can."""
        worker = self.rt.replicas.get(worker_id)
        if worker is None:
            return f"its worker {worker_id} is gone"
        if worker.status.is_failed:
            why = self.rt.failure_reasons.get(worker_id)
            return f"its worker {worker_id} is {worker.status}" + (f" ({why})" if why else "")
        held = self.rt.held.get(worker_id)
        if held is not None and held.handle is not None:
            code = held.handle.exit_code()
            if code is not None:
                return f"its worker {worker_id}'s process exited with code {code}"
        return None

    def _reap(self, job: JobRow) -> None:
        handle = self.handles.get(job.id)
        if handle is None:
            if job.status.holds_worker and job.id not in self.starting:
                # No process and none being started: it ended while no controller ran.
                self._ended(job, None, " while the controller was down")
            return
        code = handle.exit_code()
        if code is None:
            return
        recorded = recorded_exit(self.rt.home, job.id)
        del self.handles[job.id]
        self.stopping.discard(job.id)
        self._ended(job, recorded if recorded is not None else code, "")
        self._spawn(self.rt.backend.stop(handle, 0.1))  # its port, cgroup, namespace
        self.rt.wake()

    def _ended(self, job: JobRow, code: int | None, when: str) -> None:
        """Its process ended with ``code`` (None: its own record, else lost): ended
        for good, or RECOVERING as :func:`after_exit` says. An end the controller
        did not see keeps the time the job wrote its exit code."""
        if code is None:
            code = recorded_exit(self.rt.home, job.id)
        lost = self.worker_lost(job.worker) if job.worker is not None else None
        outcome = after_exit(
            code,
            cancelled=job.status is JobStatus.CANCELLING,
            worker_lost=lost,
            recovery=job.recovery,
            restarts=job.restarts,
        )
        why = outcome.reason + when
        if outcome.status is JobStatus.RECOVERING:
            self._to_recovering(job, why, exit_code=code, restarts=outcome.restarts)
            return
        ended = recorded_end(self.rt.home, job.id) if when else None
        now = ended if ended is not None else self.rt.clock.wall()
        self.table.move(
            job, outcome.status, why, exit_code=code, ended_at=now, restarts=outcome.restarts
        )

    def _recover(self, job: JobRow, lost: str) -> None:
        """Its worker was lost while its process runs on: stop that process (the
        job's own cgroup, never another's), then run the job again elsewhere."""
        handle = self.handles.pop(job.id, None)
        if handle is not None:
            self.stopping.add(job.id)
            self._spawn(self._stop_then_wake(job.id, handle))
        self._to_recovering(job, f"{lost}; its process is stopped, recovering on a worker")

    async def _stop_then_wake(self, job_id: int, handle: ReplicaHandle) -> None:
        try:
            await self.rt.backend.stop(handle, STOP_TIMEOUT_S)
        finally:
            self.stopping.discard(job_id)
            self.rt.wake()

    def _to_recovering(self, job: JobRow, why: str, **values: Any) -> None:
        values.setdefault("restarts", job.restarts)
        self.table.move(
            job,
            JobStatus.RECOVERING,
            why,
            worker=None,
            pid=None,
            pid_create_time=None,
            recoveries=job.recoveries + 1,
            **values,
        )
        self.rt.wake()

    def _stop(self, job: JobRow) -> None:
        handle = self.handles.get(job.id)
        if handle is not None:  # else its launch sees CANCELLING and stops it then
            self.stopping.add(job.id)
            self._spawn(self.rt.backend.stop(handle, STOP_TIMEOUT_S))

    async def _start(self, job_id: int, worker_id: int) -> None:
        rt = self.rt
        try:
            handle = await self._launch(job_id, worker_id)
        except asyncio.CancelledError:
            self.starting.discard(job_id)
            raise
        except Exception as exc:  # the job fails visibly, never stuck STARTING
            self.starting.discard(job_id)
            log.warning("starting job %s on %s failed", job_id, rt.name, exc_info=True)
            job = self.table.get(job_id)
            lost = self.worker_lost(worker_id)
            if job is not None and job.status is JobStatus.STARTING and lost is not None:
                self._to_recovering(job, f"{lost} before the job started")
            elif job is not None and job.status in (JobStatus.STARTING, JobStatus.CANCELLING):
                new = (
                    JobStatus.CANCELLED if job.status is JobStatus.CANCELLING else JobStatus.FAILED
                )
                self.table.move(job, new, one_line(exc), ended_at=rt.clock.wall())
            rt.wake()
            return
        self.handles[job_id] = handle
        self.starting.discard(job_id)
        job = self.table.get(job_id)
        if job is not None and job.status is JobStatus.STARTING:
            self.table.move(
                job,
                JobStatus.RUNNING,
                f"running on worker {worker_id} (pid {handle.pid})",
                pid=handle.pid,
                pid_create_time=handle.create_time,
                started_at=rt.clock.wall(),
            )
        elif job is not None:  # cancelled while it was being launched
            self.table.set_process(job, handle.pid, handle.create_time, rt.clock.wall())
            self._stop(job)
        rt.wake()

    async def _launch(self, job_id: int, worker_id: int) -> ReplicaHandle:
        """The job's process, in its worker's version's workdir and environment."""
        rt = self.rt
        job = self.table.get(job_id)
        worker = rt.replicas.get(worker_id)
        if job is None or worker is None:
            raise RuntimeError(f"worker {worker_id} is gone")
        spec = rt.spec_for(worker.version)
        env = rt.environment.setup_env(rt.environment.env(worker, spec))
        env.update(job_env(job, worker))
        env[contract.REPLICA_TAG] = contract.replica_tag(
            rt.home.root, rt.name, JOB_ID_BASE + job.id
        )
        # Prepared already (the worker ran setup): this finds the version's workdir
        # and environment again and builds nothing.
        setup = built_setup(spec.setup, pool=True)
        workdir = await rt.backend.prepare(
            rt.name, worker.version, setup, env, pip=spec.pip, isolate=isolated(spec)
        )
        exit_path = exit_file(rt.home, job.id)
        exit_path.parent.mkdir(parents=True, exist_ok=True)
        exit_path.unlink(missing_ok=True)
        return await rt.backend.launch(
            LaunchRequest(
                service=rt.name,
                version=worker.version,
                replica_id=JOB_ID_BASE + job.id,
                command=["bash", "-c", _RECORDS_EXIT, "steady-job", job.run, str(exit_path)],
                env=env,
                workdir=workdir,
                log_path=job_log(rt.home, job.id),
                setup=setup,
                pip=spec.pip,
                resources=spec.resources,
                isolate=isolated(spec),
                setup_in_log=False,
            )
        )

    def cancel(self, job_id: int) -> str:
        """``steady jobs cancel``: a waiting job ends now, a started one is stopped."""
        job = self.table.get(job_id)
        assert job is not None
        if job.status.waits:
            now = self.rt.clock.wall()
            ran = job.status is JobStatus.RECOVERING
            why = "cancelled while it waited to run again" if ran else "cancelled before it ran"
            self.table.move(job, JobStatus.CANCELLED, why, ended_at=now)
            return (
                f"job {job.id} cancelled ({'it was recovering' if ran else 'it had not started'})"
            )
        if job.status is not JobStatus.CANCELLING:
            self.table.move(job, JobStatus.CANCELLING, "steady jobs cancel")
        self.rt.wake()
        return f"job {job.id} is being cancelled"

    def _readopt(self) -> None:
        """Jobs a previous controller started whose process still runs are held again."""
        for job in self.table.of_pool(self.rt.name, live=True):
            if job.pid is None or not job.status.holds_worker:
                continue
            request = AdoptRequest(
                job.pid,
                job.pid_create_time,
                "127.0.0.1",
                0,
                None,
                service=self.rt.name,
                replica_id=JOB_ID_BASE + job.id,
            )
            handle = self.rt.backend.adopt(request)
            if handle is not None:
                self.handles[job.id] = handle

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def status_json(self) -> dict[str, Any]:
        """The ``pool`` of ``status --json``: its policy, queue and who runs what."""
        live = self.table.of_pool(self.rt.name, live=True)
        return {
            "policy": self.pool.model_dump(mode="json"),
            "pending_jobs": sum(1 for j in live if j.status.waits),
            "jobs": {str(j.worker): j.id for j in live if j.status.holds_worker and j.worker},
        }

    def failure(self) -> str | None:
        """Why the pool is FAILED (its version failed before any worker was ready),
        with the last words of its latest failed worker; None while it is not."""
        rt = self.rt
        if rt.row.status is not ServiceStatus.FAILED:
            return None
        version = rt.row.version
        said = [
            rt.failure_reasons[r.id]
            for r in sorted(rt.replicas.values(), key=lambda r: r.id)
            if r.version == version and r.id in rt.failure_reasons
        ]
        why = f"version {version} failed before any worker was ready"
        return f"{why}: {said[-1]}" if said else why

    def pids(self) -> set[int]:
        return {h.pid for h in self.handles.values() if h.pid is not None}

    async def down(self) -> None:
        """The pool goes down: pending jobs are cancelled, started ones stopped."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        now = self.rt.clock.wall()
        stops = []
        for job in self.table.of_pool(self.rt.name, live=True):
            if job.status.waits:
                self.table.move(job, JobStatus.CANCELLED, "the pool went down", ended_at=now)
                continue
            if job.status is not JobStatus.CANCELLING:
                self.table.move(job, JobStatus.CANCELLING, "the pool goes down")
            handle = self.handles.pop(job.id, None)
            if handle is not None:
                stops.append(self.rt.backend.stop(handle, STOP_TIMEOUT_S))
            self.table.move(job, JobStatus.CANCELLED, "the pool went down", ended_at=now)
        await asyncio.gather(*stops, return_exceptions=True)
