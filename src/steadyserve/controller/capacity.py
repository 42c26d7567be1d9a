"""The controller's one view of what the machine has left: shared by every service.

Every replica of every service on this controller runs on one machine, so a
replica's GPUs, pinned cores and fixed port are held against all the others'.
What is held is derived from the replica rows (their ``assignment`` column), never
kept beside them, so a restarted controller that re-adopts the rows holds exactly
what the previous one handed out. The arithmetic is core/capacity.py's; this
module feeds it the inventory and the rows, and wakes the replicas that wait.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable

from steadyserve.backends.base import Backend
from steadyserve.core.capacity import (
    Assignment,
    Insufficient,
    Inventory,
    Request,
    assign,
    reason_after,
    room,
)
from steadyserve.core.capacity import gpu_count as whole_gpus
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ServiceSpec
from steadyserve.spec.machine import this_inventory
from steadyserve.spec.models import Resources
from steadyserve.spec.ports import fixed_port, isolated
from steadyserve.store import ReplicaRow

Rows = Callable[[], Iterable[ReplicaRow]]


def holds(replica: ReplicaRow) -> bool:
    """A replica holds its assignment while its process runs or may still start:
    live, stopping, or failed with a process not stopped yet."""
    if not replica.assignment:
        return False
    status = replica.status
    return status.is_live or status is ReplicaStatus.SHUTTING_DOWN or replica.pid is not None


def request_for(spec: ServiceSpec, *, enforce_gpus: bool = True, isolates: bool = False) -> Request:
    """What one replica of ``spec`` holds: its accelerators (any of the
    alternatives), its cores when ``resources.pin_cpus`` asks, its fixed port
    unless it binds that port in a network namespace of its own (docs/isolation.md),
    where every replica may have the same one: ``isolates``, the backend can give one."""
    res = spec.resources
    choices: list[tuple[str, int]] = []
    alternatives = res.any_of or res.ordered
    if alternatives:
        for alt in alternatives:
            own = _choices(alt) or _choices(res)
            choices.extend(own or [("", 0)])
    else:
        choices = _choices(res)
    cores = 0
    if res.pin_cpus and res.min_cpus is not None:
        cores = max(1, math.ceil(res.min_cpus))
    port = fixed_port(spec)
    if port is not None and isolated(spec) and isolates:
        port = None
    return Request(
        accelerators=tuple(choices) if enforce_gpus else (),
        cores=cores,
        ports=(port,) if port is not None else (),
    )


def _choices(res: Resources) -> list[tuple[str, int]]:
    return [(name, whole_gpus(count)) for name, count in res.accelerator_choices()]


class CapacityPool:
    """The inventory and the rows that hold parts of it; replicas wait here for room."""

    def __init__(
        self, inventory: Inventory, rows: Rows, *, places: bool = True, isolates: bool = False
    ) -> None:
        self.inventory = inventory
        self._rows = rows
        self.places = places
        """False for a backend that places replicas itself (Ray): nothing is held here."""
        self.isolates = isolates
        """The backend gives replicas namespaces of their own: an isolated replica's
        fixed port is its own, no capacity to share."""
        self._changed = asyncio.Event()
        self.generation = 0
        """Bumped by every :meth:`changed`: a waiter that looked at generation N
        and found no room waits until it is past N, so no release is missed."""
        self.waiting = 0

    @classmethod
    def alone(cls, backend: Backend, rows: Rows) -> CapacityPool:
        """The pool of a service no controller shares one with: no GPUs divided."""
        isolates = backend.isolation_unavailable() is None
        return cls(this_inventory(gpus=False), rows, isolates=isolates)

    def request(self, spec: ServiceSpec) -> Request:
        # A machine without a GPU has nothing to divide: accelerator requests are
        # the machine check's to refuse (spec/machine.py), or --ignore-resources'.
        if not self.places:
            return Request()
        return request_for(spec, enforce_gpus=bool(self.inventory.gpus), isolates=self.isolates)

    def taken(self) -> list[Assignment]:
        held = []
        for row in self._rows():
            if holds(row):
                got = Assignment.from_json(row.assignment)
                if got is not None:
                    held.append(got)
        return held

    def assign(self, spec: ServiceSpec) -> Assignment | Insufficient:
        return assign(self.inventory, self.taken(), self.request(spec))

    def room(self, spec: ServiceSpec, limit: int) -> int:
        """How many more replicas of ``spec`` fit now (at most ``limit``)."""
        return room(self.inventory, self.taken(), self.request(spec), limit)

    def limit(self, spec: ServiceSpec, most: int) -> int | None:
        """What the planner may launch of ``spec`` now (``room`` up to ``most``), or
        None when a replica of it asks for nothing this pool divides."""
        if self.request(spec).empty:
            return None
        return self.room(spec, most)

    def cap(self, spec: ServiceSpec, wanted: int, current: int) -> tuple[int | None, str | None]:
        """An autoscaling target capped at the ``current`` replicas plus what fits,
        and what the first replica beyond the cap would lack; (None, None) when
        ``wanted`` fits."""
        if wanted <= current:
            return None, None
        fits = self.limit(spec, wanted - current)
        if fits is None or current + fits >= wanted:
            return None, None
        return current + fits, self.why_not(spec, fits)

    def why_not(self, spec: ServiceSpec, after: int = 0) -> str | None:
        """Why one more replica of ``spec`` does not fit now, or once ``after`` more
        were admitted; None when it does."""
        return reason_after(self.inventory, self.taken(), self.request(spec), after)

    def changed(self) -> None:
        """Something may have been released: every waiting replica looks again."""
        self.generation += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, since: int) -> None:
        """Until :meth:`changed` was called after generation ``since`` was read."""
        self.waiting += 1
        try:
            while self.generation == since:
                await self._changed.wait()
        finally:
            self.waiting -= 1
