"""The controller's side of the route table: publish, long-poll, acknowledge.

Load balancers hold a GET open until the table changes, so a change reaches
them in milliseconds (SkyServe syncs every 20 s). The ``known`` value of an
LB's next poll is its acknowledgement, which draining waits for.

A load balancer may run several worker processes on one endpoint
(``service.load_balancer.workers``). Each worker polls and reports with its own
id (its pid), and each routes by the table it last saw: so a replica is drained
only when *every* live worker has acknowledged a table without it and reports
nothing in flight for it. A worker not heard from for ``WORKER_STALE_S`` (it
died; its supervisor starts a new one with a new id) no longer holds draining up.
Autoscaling and metrics see one report: the live workers' counts summed. The
counters (``metrics``) add up only the workers of the reporting LB process (same
``lb_pid``): when the LB restarts, the observer (controller/metrics.py
``EntryCounts``) folds the old process's last counters into its base as the
``lb_pid`` changes, so a dead worker still lingering here must not be added again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from steadyserve.controller.clock import SYSTEM_CLOCK
from steadyserve.wire.counts import merge_counts

# A worker reports twice a second and always has a poll open or on its way: one
# silent for this long is gone.
WORKER_STALE_S = 5.0


@dataclass
class WorkerView:
    """What one load-balancer worker has acknowledged and reported."""

    acked_version: int = -1
    report_version: int = -1
    inflight: dict[int, int] = field(default_factory=dict)
    requests: dict[int, int] = field(default_factory=dict)
    queued: int = 0
    report: dict[str, Any] = field(default_factory=dict)
    seen_at: float = 0.0
    polling: int = 0  # long-polls open right now


class RoutePublisher:
    """One service's current route table and what its load balancer workers have seen."""

    def __init__(
        self,
        epoch: str,
        clock: Callable[[], float] = SYSTEM_CLOCK.now,
    ) -> None:
        """``clock`` measures staleness (monotonic)."""
        self.epoch = epoch
        self.version = 0
        self.table: dict[str, Any] = {}
        self._content: dict[str, Any] | None = None
        self._changed = asyncio.Event()
        self._clock = clock
        self.workers: dict[str, WorkerView] = {}
        self.polls_since_start = 0
        self.closed = False

    @property
    def token(self) -> str:
        return f"{self.epoch}:{self.version}"

    def publish(self, content: dict[str, Any]) -> bool:
        """Install a new table if its content changed; wake every waiting poll."""
        if content == self._content:
            return False
        self._content = content
        self.version += 1
        self.table = {**content, "epoch": self.epoch, "version": self.version}
        self._changed.set()
        self._changed = asyncio.Event()
        return True

    def close(self) -> None:
        """The service is gone: answer every open poll now, not at its timeout (a
        handle holding a 25 s poll on it would learn of the name's next service late)."""
        self.closed = True
        self._changed.set()

    def _version_of(self, key: str) -> int:
        epoch, _, version = key.partition(":")
        return int(version) if epoch == self.epoch and version.isdigit() else -1

    def _worker(self, worker: str) -> WorkerView:
        view = self.workers.get(worker)
        if view is None:
            view = self.workers[worker] = WorkerView()
        view.seen_at = self._clock()
        return view

    def live(self) -> list[WorkerView]:
        """Workers heard from lately (or polling now); forgets the others."""
        horizon = self._clock() - WORKER_STALE_S
        for key in [k for k, w in self.workers.items() if w.seen_at < horizon and not w.polling]:
            del self.workers[key]
        return list(self.workers.values())

    def acknowledge(self, known: str, worker: str = "") -> None:
        view = self._worker(worker)
        self.polls_since_start += 1
        version = self._version_of(known)
        if version > view.acked_version:
            view.acked_version = version

    async def wait(self, known: str, timeout: float, worker: str = "") -> dict[str, Any] | None:
        """The table, as soon as it differs from ``known`` (or after ``timeout``).

        None once closed (the service is gone), and while nothing was published yet:
        a controller that just restarted has not looked at its replicas, and an
        empty table would make the LB drop them.
        """
        self.acknowledge(known, worker)
        if self.closed:
            return None
        if known != self.token and self.version > 0:
            return self.table
        event = self._changed
        view = self._worker(worker)
        view.polling += 1
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
        finally:
            view.polling -= 1
            view.seen_at = self._clock()
        return self.table if self.version > 0 and not self.closed else None

    def report(
        self,
        table: str,
        inflight: dict[int, int],
        requests: dict[int, int],
        queued: int = 0,
        raw: dict[str, Any] | None = None,
    ) -> tuple[dict[int, int], dict[int, int], int, dict[str, Any]]:
        """Record one worker's report; return the service-wide one (every live
        worker summed): in-flight and request counts, queued, and the raw report
        with its metrics merged over the workers of its own LB process (its
        ``lb_pid``: another process's counters are folded once by the observer),
        for autoscaling and the controller's metrics."""
        raw = raw or {}
        view = self._worker(str(raw.get("worker", "")))
        view.report_version = self._version_of(table)
        view.inflight = inflight
        view.requests = requests
        view.queued = queued
        view.report = raw
        live = self.live()
        if len(live) == 1:
            return inflight, requests, queued, raw
        merged = _merged(raw, [w for w in live if w.report.get("lb_pid") == raw.get("lb_pid")])
        return self.inflight, self.requests, sum(w.queued for w in live), merged

    @property
    def inflight(self) -> dict[int, int]:
        return _summed(w.inflight for w in self.live())

    @property
    def requests(self) -> dict[int, int]:
        return _summed(w.requests for w in self.live())

    def drained(self, replica_id: int, removed_in: int) -> bool:
        """True once every live LB worker routes by a table without the replica and
        has nothing in flight for it."""
        live = self.live()
        return bool(live) and all(
            w.acked_version >= removed_in
            and w.report_version >= removed_in
            and w.inflight.get(replica_id, 0) == 0
            for w in live
        )


def _summed(counts: Any) -> dict[int, int]:
    total: dict[int, int] = {}
    for one in counts:
        for rid, n in one.items():
            total[rid] = total.get(rid, 0) + n
    return total


_SUMMED_GAUGES = ("inflight_total", "queued", "websockets_going_away")


def _merged(raw: dict[str, Any], live: list[WorkerView]) -> dict[str, Any]:
    """``raw`` with its ``metrics`` replaced by those of ``live``, added up."""
    parts = [w.report["metrics"] for w in live if isinstance(w.report.get("metrics"), dict)]
    if not parts:
        return raw
    metrics = reduce(merge_counts, parts)
    for gauge in _SUMMED_GAUGES:
        metrics[gauge] = sum(int(p.get(gauge) or 0) for p in parts)
    for name in ("websockets_open", "websockets_total"):
        metrics[name] = {
            str(k): v for k, v in _summed(_int_keys(p.get(name)) for p in parts).items()
        }
    return {**raw, "metrics": metrics}


def _int_keys(counts: Any) -> dict[int, int]:
    if not isinstance(counts, dict):
        return {}
    return {int(k): int(v) for k, v in counts.items()}
