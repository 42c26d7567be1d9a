"""Load signals: what load balancers and replicas report, kept in a window by time.

A load balancer reports at least once a second: for each replica, how many
requests it started since its previous report and how many are in flight, plus
how many wait in its own queue. A Python replica also reports its own ongoing
count; where present it is preferred over the balancer's in-flight count, as
Ray Serve prefers the replica's own number.

Nothing here reads a clock: every sample carries its time, and every question
("the rate over the last 60 s") is asked at a ``now`` the caller passes in.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

__all__ = ["LoadSample", "LoadWindow", "ReplicaLoad", "mean_ongoing", "qps"]


@dataclass(frozen=True)
class ReplicaLoad:
    """One replica's part of a load report."""

    replica_id: int
    started: int = 0
    """Requests the balancer started on this replica since its previous report."""
    in_flight: int = 0
    """Requests the balancer has sent to this replica and not yet seen answered."""
    ongoing: float | None = None
    """The replica's own count of requests it is handling (Python replicas), or None."""

    @property
    def load(self) -> float:
        """Ongoing requests on this replica: its own count when it reports one."""
        return self.in_flight if self.ongoing is None else self.ongoing


@dataclass(frozen=True)
class LoadSample:
    """One load report of a service at ``time`` (seconds, any monotonic origin)."""

    time: float
    replicas: tuple[ReplicaLoad, ...] = ()
    queued: int = 0
    """Requests waiting in the balancer's queue for a free replica."""

    # Cached: a sample never changes, and every reconcile tick sums these over the
    # whole window (a minute of reports), which made them a tenth of a tick's cost.
    @cached_property
    def started(self) -> int:
        """Requests started on any replica since the previous report."""
        return sum(replica.started for replica in self.replicas)

    @cached_property
    def ongoing(self) -> float:
        """Ray Serve's "ongoing requests": running on replicas plus waiting for one."""
        return sum(replica.load for replica in self.replicas) + self.queued


@dataclass
class LoadWindow:
    """The recent samples of one service, oldest first, at most ``span`` seconds old.

    Memory is bounded by time: adding a sample drops those more than ``span``
    seconds older than the newest one (and, as a backstop against a flood of
    reports, all but the newest ``max_samples``). A sample that arrives late is
    put in its place by time, so reports from two sources may interleave.
    """

    span: float
    max_samples: int = 10_000
    _samples: deque[LoadSample] = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if not self.span > 0:
            raise ValueError("span must be > 0")
        if self.max_samples < 1:
            raise ValueError("max_samples must be >= 1")

    def add(self, sample: LoadSample) -> None:
        if not self._samples or sample.time >= self._samples[-1].time:
            self._samples.append(sample)
        else:
            times = [s.time for s in self._samples]
            self._samples.insert(bisect.bisect_right(times, sample.time), sample)
        self._trim()

    def resize(self, span: float) -> None:
        """Keep ``span`` seconds from now on (a policy change may need a longer look-back)."""
        if not span > 0:
            raise ValueError("span must be > 0")
        self.span = span
        self._trim()

    def _trim(self) -> None:
        newest = self._samples[-1].time if self._samples else 0.0
        while self._samples and (
            self._samples[0].time <= newest - self.span or len(self._samples) > self.max_samples
        ):
            self._samples.popleft()

    def between(self, start: float, end: float) -> list[LoadSample]:
        """Samples with ``start < time <= end``."""
        return [s for s in self._samples if start < s.time <= end]

    def __len__(self) -> int:
        return len(self._samples)

    def __iter__(self) -> Iterator[LoadSample]:
        return iter(self._samples)


def qps(samples: Sequence[LoadSample], period: float) -> float:
    """Requests started in ``samples`` per second of ``period``.

    Like SkyServe, the count is divided by the whole period even when reports
    cover less of it (a service that just started is not judged on 2 seconds).
    """
    return sum(sample.started for sample in samples) / period


def mean_ongoing(samples: Sequence[LoadSample]) -> float:
    """Ongoing requests averaged over the samples (Ray Serve's default aggregation)."""
    if not samples:
        return 0.0
    return sum(sample.ongoing for sample in samples) / len(samples)
