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

After the rows, one more row of ``(replica id, queue x 1000)`` slots holds the
replicas' own queue gauges, written by worker 0's metrics scraper
(replica_metrics.py) and read by every other worker's request-aware policy;
-1 is "no fresh reading".
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
    os.ftruncate(fd, _size(workers))
    return fd


def _size(workers: int) -> int:
    """The rows of in-flight counts, then the row of scraped queues."""
    return (workers + 1) * SLOTS * 2 * _WORD


class SharedLoad:
    """This worker's view of the shared counts."""

    def __init__(self, fd: int, workers: int, index: int) -> None:
        self._map = mmap.mmap(fd, _size(workers))
        self.cells = memoryview(self._map).cast("q")
        self.workers = workers
        self.index = index
        self._other_rows = [w * SLOTS * 2 for w in range(workers) if w != index]
        self._queues = workers * SLOTS * 2

    def publish_queue(self, replica_id: int, queue: float | None) -> None:
        """Worker 0's scrape of ``replica_id``'s own queue (None: no fresh reading)."""
        base = self._queues + (replica_id % SLOTS) * 2
        cells = self.cells
        cells[base + 1] = -1 if queue is None else max(0, round(queue * 1000))
        cells[base] = replica_id

    def queue_of(self, replica_id: int) -> float | None:
        base = self._queues + (replica_id % SLOTS) * 2
        cells = self.cells
        if cells[base] != replica_id or cells[base + 1] < 0:
            return None
        return cells[base + 1] / 1000

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

    __slots__ = ("accelerator", "capacity", "id", "inflight", "replica", "shared", "version")

    @property
    def queue(self) -> float | None:
        """A fresh scrape of the replica's own queue, if any (policies.load_of): this
        worker's own (worker 0 scrapes), else the one worker 0 published."""
        queue: float | None = getattr(self.replica, "queue", None)
        return self.shared.queue_of(self.id) if queue is None else queue

    def __init__(self, replica: Candidate, inflight: int, shared: SharedLoad) -> None:
        self.shared = shared
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
            views = self._views = [_View(r, 0, shared) for r in replicas]
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
