"""In-flight counts shared between load-balancer workers, so least-load sees them all.

Each worker (lb/workers.py) only tracks its own requests. To balance on the
whole endpoint's load, the workers share a small memory file (a memfd the
supervisor creates and every worker maps): one row per worker, one slot per
replica (``id % SLOTS``) holding ``(replica id, in-flight)``. A worker writes
only its own row, so no locks are needed: 8-byte aligned stores are atomic
enough, and a reader that sees a count a moment old balances a moment late.

``SharedPolicy`` wraps the service's policy: it publishes this worker's counts,
then lets the policy choose among views whose ``inflight`` is the sum over all
workers, so ``least_load`` and the ``max_ongoing_requests`` cap apply to the
endpoint, not to one worker. A worker publishes a slot it takes at once, and its
releases by a refresh every ``REFRESH_S`` while anything is in flight (the load
balancer's ``_share`` loop, which also wakes requests queued here when another
worker freed a slot). Two live replicas whose ids are equal modulo ``SLOTS``
share a slot, and then balance on a slightly wrong count: never wrong routing.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, TypeVar

from steadyserve.core.routing.policies import NO_EXCLUDE, NO_KEY, Candidate, Policy

if TYPE_CHECKING:
    from steadyserve.lb.balancer import Balancer

SLOTS = 256
REFRESH_S = 0.005
_WORD = 8

C = TypeVar("C", bound=Candidate)


def create(workers: int) -> int:
    """A zeroed shared file for ``workers`` rows; the descriptor to pass on."""
    fd = os.memfd_create("steady-lb-load", 0)
    os.ftruncate(fd, workers * SLOTS * 2 * _WORD)
    return fd


class SharedLoad:
    """This worker's view of the shared counts."""

    def __init__(self, fd: int, workers: int, index: int) -> None:
        self._map = mmap.mmap(fd, workers * SLOTS * 2 * _WORD)
        self.cells = memoryview(self._map).cast("q")
        self.workers = workers
        self.index = index
        self._other_rows = [w * SLOTS * 2 for w in range(workers) if w != index]

    def publish(self, replica_id: int, inflight: int) -> None:
        base = (self.index * SLOTS + replica_id % SLOTS) * 2
        cells = self.cells
        if cells[base] != replica_id:
            cells[base + 1] = 0  # a new replica in this slot: never a stale count under its id
            cells[base] = replica_id
        cells[base + 1] = inflight

    def others(self, replica_id: int) -> int:
        """In flight to ``replica_id`` from every other worker."""
        cells = self.cells
        total = 0
        for row in self._other_rows:
            base = row + (replica_id % SLOTS) * 2
            if cells[base] == replica_id:
                total += cells[base + 1]
        return total


class _View:
    """A replica as the wrapped policy sees it: its endpoint-wide in-flight count."""

    __slots__ = ("accelerator", "capacity", "id", "inflight", "replica", "version")

    @property
    def queue(self) -> float | None:
        """A fresh scrape of the replica's own queue, if any (policies.load_of)."""
        queue: float | None = getattr(self.replica, "queue", None)
        return queue

    def __init__(self, replica: Candidate, inflight: int) -> None:
        self.id = replica.id
        self.inflight = inflight
        self.replica = replica
        self.version = replica.version
        self.capacity = replica.capacity
        self.accelerator = replica.accelerator


class SharedPolicy:
    """The service's policy, deciding on the counts of every worker.

    Kept cheap (it runs per request): the views are built once per replica list,
    and this worker's own counts are published when it takes a slot here and by
    ``refresh`` (releases), not for every replica at every choice.
    """

    def __init__(self, inner: Policy, shared: SharedLoad) -> None:
        self.inner = inner
        self.shared = shared
        self.name = inner.name
        self.request_key = inner.request_key
        self._for: object = None  # the replica list the views were built for
        self._views: list[_View] = []

    def choose(
        self,
        replicas: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        shared = self.shared
        views = self._views
        if self._for is not replicas:
            views = self._views = [_View(r, 0) for r in replicas]
            self._for = replicas
        others = shared.others
        for view in views:
            view.inflight = view.replica.inflight + others(view.id)
        chosen = self.inner.choose(views, max_ongoing, exclude, key)
        if chosen is None:
            return None
        replica: C = chosen.replica  # type: ignore[assignment]
        shared.publish(replica.id, replica.inflight + 1)  # the balancer takes the slot next
        return replica

    def forget(self, replica_id: int) -> None:
        self.inner.forget(replica_id)


def share(balancer: Balancer, shared: SharedLoad) -> None:
    """Make ``balancer`` choose on shared counts (again after a table changed its policy)."""
    if not isinstance(balancer.policy, SharedPolicy):
        balancer.policy = SharedPolicy(balancer.policy, shared)


def refresh(balancer: Balancer, shared: SharedLoad) -> bool:
    """Publish this worker's counts; True while any is above zero."""
    busy = False
    for replica in balancer.known.values():
        shared.publish(replica.id, replica.inflight)
        busy = busy or replica.inflight > 0
    return busy
