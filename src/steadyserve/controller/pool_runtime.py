"""A pool's reconcile loop: a service's, with workers for replicas and a job queue.

A pool (``service.pool``, docs/pools.md) keeps its workers as a service keeps
its replicas (provisioning, setup once per version, exits, updates, the same
sealed environments and isolation), with three differences carried out here:
no load balancer (nothing is routed, so nothing is supervised or waited for),
the size is the queue's (core/autoscale/queue.py, never fewer workers than
hold a job, and a busy worker is never drained), and one more apply step runs
the scheduler (controller/pool.py). A worker is ready once its setup ran and
its process runs (probing.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from steadyserve.controller.errors import BadInput
from steadyserve.controller.job_tables import JobTable
from steadyserve.controller.pool import PoolJobs
from steadyserve.controller.runtime import ServiceRuntime, Tick
from steadyserve.spec import ServiceSpec
from steadyserve.store import ServiceRow, Store


class PoolRuntime(ServiceRuntime):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.jobs = PoolJobs(self, JobTable(self.store))

    def tick_steps(self) -> tuple[tuple[str, Callable[[Tick], None]], ...]:
        """A service's steps, then the scheduler's, before the status is written."""
        steps = super().tick_steps()
        *applied, last = steps
        return (*applied, ("apply", self._run_jobs), last)

    def _run_jobs(self, tick: Tick) -> None:
        self.jobs.tick(tick.plan)

    def _supervise_lb(self, _: Tick) -> None:
        """A pool has no load balancer and no endpoint."""

    def lb_ready(self) -> bool:
        return True

    def target_replicas(self) -> int:
        return self.jobs.target()

    def _autoscale(self, tick: Tick) -> None:
        self.jobs.autoscale(self.clock.now())

    def _plan(self, tick: Tick) -> None:
        super()._plan(tick)
        tick.plan = self.plan = self.jobs.protect(tick.plan)  # busy workers stay

    def adopted_pids(self) -> set[int]:
        return super().adopted_pids() | self.jobs.pids()

    async def take_down(self, purge: bool) -> None:
        self._stopping = True  # no tick starts another job meanwhile
        await self.jobs.down()  # the jobs end before their workers
        await super().take_down(purge)


def runtime_class(store: Store, row: ServiceRow) -> type[ServiceRuntime]:
    """A pool's runtime for a pool's row, a service's for a service's."""
    version = store.version(row.name, row.version)
    if version is not None and ServiceSpec.from_json(version.spec_json).service.pool is not None:
        return PoolRuntime
    return ServiceRuntime


def same_kind(old: ServiceSpec, new: ServiceSpec, name: str) -> None:
    """An update keeps what it updates: a service stays a service, a pool a pool
    (the one has a load balancer and an endpoint, the other a job queue)."""
    if (old.service.pool is None) != (new.service.pool is None):
        was, asked = ("a pool", "a service") if old.service.pool else ("a service", "a pool")
        raise BadInput(
            f"{name} is {was} and the file is {asked}: take {name} down first, or use another name"
        )
