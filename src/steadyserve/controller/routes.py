"""The controller's side of the route table: publish, long-poll, acknowledge.

Load balancers hold a GET open until the table changes, so a change reaches
them in milliseconds (SkyServe syncs every 20 s). The ``known`` value of an
LB's next poll is its acknowledgement, which draining waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

# rsconfig hook: another load balancer (the gateway) that routes this service
# too counts for draining while it polls; one silent this long is gone.
CONSUMER_GONE_S = 45.0


@dataclass
class _Consumer:
    """What one more load balancer (not the service's own) has seen and reported."""

    acked_version: int = -1
    report_version: int = -1
    last_poll_at: float = 0.0
    inflight: dict[int, int] = field(default_factory=dict)
    requests: dict[int, int] = field(default_factory=dict)
    queued: int = 0


class RoutePublisher:
    """One service's current route table and what its load balancer has seen."""

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.version = 0
        self.table: dict[str, Any] = {}
        self._content: dict[str, Any] | None = None
        self._changed = asyncio.Event()
        self.acked_version = -1
        self.last_poll_at: float | None = None
        self.polls_since_start = 0
        self.inflight: dict[int, int] = {}
        self.requests: dict[int, int] = {}
        self.report_at: float = 0.0
        self.report_version = -1
        self.ack_at: float = 0.0
        self.consumers: dict[str, _Consumer] = {}

    @property
    def token(self) -> str:
        return f"{self.epoch}:{self.version}"

    def publish(self, content: dict[str, Any]) -> bool:
        """Install a new table if its content changed; wake every waiting poll."""
        if content == self._content:
            return False
        self._content = content
        self.version += 1
        self.table = {"epoch": self.epoch, "version": self.version, **content}
        self._changed.set()
        self._changed = asyncio.Event()
        return True

    def acknowledge(self, known: str, consumer: str = "") -> None:
        epoch, _, version = known.partition(":")
        if consumer:
            seen = self.consumers.setdefault(consumer, _Consumer())
            seen.last_poll_at = time.monotonic()
            if epoch == self.epoch and version.isdigit():
                seen.acked_version = max(seen.acked_version, int(version))
            return
        self.last_poll_at = time.time()
        self.polls_since_start += 1
        if epoch == self.epoch and version.isdigit() and int(version) > self.acked_version:
            self.acked_version = int(version)
            self.ack_at = time.time()

    async def wait(self, known: str, timeout: float, consumer: str = "") -> dict[str, Any] | None:
        """The table, as soon as it differs from ``known`` (or after ``timeout``).

        None while nothing was published yet: a controller that just restarted has
        not looked at its replicas, and an empty table would make the LB drop them.
        """
        self.acknowledge(known, consumer)
        if known != self.token and self.version > 0:
            return self.table
        event = self._changed
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        return self.table if self.version > 0 else None

    def report(
        self,
        table: str,
        inflight: dict[int, int],
        requests: dict[int, int],
        consumer: str = "",
        queued: int = 0,
    ) -> None:
        epoch, _, version = table.partition(":")
        if consumer:
            seen = self.consumers.setdefault(consumer, _Consumer())
            seen.report_version = int(version) if epoch == self.epoch and version.isdigit() else -1
            seen.inflight = inflight
            seen.requests = requests
            seen.queued = queued
            return
        self.report_version = int(version) if epoch == self.epoch and version.isdigit() else -1
        self.inflight = inflight
        self.requests = requests
        self.report_at = time.time()

    def with_others(
        self, inflight: dict[int, int], requests: dict[int, int], queued: int
    ) -> tuple[dict[int, int], dict[int, int], int]:
        """The own load balancer's counts plus the latest of every live other one
        (the gateway's), so autoscaling sees the traffic of both ports."""
        now = time.monotonic()
        inflight, requests = dict(inflight), dict(requests)
        for seen in self.consumers.values():
            if now - seen.last_poll_at > CONSUMER_GONE_S:
                continue
            for rid, count in seen.inflight.items():
                inflight[rid] = inflight.get(rid, 0) + count
            for rid, count in seen.requests.items():
                requests[rid] = requests.get(rid, 0) + count
            queued += seen.queued
        return inflight, requests, queued

    def drained(self, replica_id: int, removed_in: int) -> bool:
        """True once the LB routes by a table without the replica and it has nothing in flight."""
        if self.acked_version < removed_in or self.report_version < removed_in:
            return False
        now = time.monotonic()
        for seen in self.consumers.values():
            if now - seen.last_poll_at > CONSUMER_GONE_S:
                continue
            if seen.acked_version < removed_in or seen.report_version < removed_in:
                return False
            if seen.inflight.get(replica_id, 0):
                return False
        return self.inflight.get(replica_id, 0) == 0
