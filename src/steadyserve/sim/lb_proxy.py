"""The parts of the real load balancer's proxy a simulated load balancer keeps: its
traffic counters (lb/metrics.py's ``LBMetrics``, what a load report carries under
``metrics``) and its canary shadow step (lb/mirror.py's ``Mirroring``, run as it is).

The proxy itself moves bytes between sockets; the simulator has none. What the
shadow code reads of an exchange and a connection (the request head, the replica
that answered, the bytes of its answer) is handed over in small stand-ins, and the
copy's own connection (``lb.mirror._ask``) is answered by the simulated replica
(sim/answers.py's ``MirroredAsk``, installed for the run). Everything else (the
mirrored share's running credit, the drops, the noise pairs taken from a second
stable replica, the comparison and its counts) is the load balancer's code.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from steadyserve.lb.metrics import BOTH_SLOTS, TTFB_SUM, LBMetrics
from steadyserve.lb.mirror import Mirroring, mirroring_for
from steadyserve.sim.answers import Nature, raw_response, request_head
from steadyserve.wire.counts import (
    COMPLETED,
    ENDPOINT,
    LATENCY_BUCKETS,
    SLOTS,
    SUM_SLOT,
    TTFB_BUCKETS,
)
from steadyserve.wire.routes import Limits, RouteTable

if TYPE_CHECKING:
    from steadyserve.lb.balancer import Balancer, ReplicaState
    from steadyserve.lb.exchange import Exchange
    from steadyserve.lb.proxy import Proxy
    from steadyserve.lb.upstream import UpstreamConnection

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]
GET = b"GET"


class _Loop:
    """``proxy.loop`` as the shadow code uses it: its comparisons become tasks of the
    simulated machine (a controller kill does not cancel them; a run numbers them)."""

    def __init__(self, spawn: Spawn) -> None:
        self.create_task = spawn


class _Client:
    upgrading = None  # never a WebSocket handshake


class _Exchange:
    """What ``Mirroring.offer`` reads of a finished exchange."""

    __slots__ = ("client", "head", "held", "held_size", "pin", "request_done", "served")

    def __init__(self, served: ReplicaState, head: bytes) -> None:
        self.served = served
        self.head = head
        self.pin = None
        self.client = _Client()
        self.request_done = True
        self.held_size = 0  # a GET: no body held
        self.held: tuple[bytes, ...] = ()


class _Upstream:
    """What ``Mirroring.offer`` reads of the connection that carried the stable answer:
    the bytes it saw, made only when the request is in the mirrored share."""

    __slots__ = ("_count", "_k", "_nature")

    def __init__(self, nature: Nature, k: int, count: int) -> None:
        self._nature, self._k, self._count = nature, k, count

    @property
    def seen(self) -> list[bytes]:
        return [raw_response(*self._nature.answer(self._k, self._count))]


class SimProxy:
    """One load balancer process's counters and shadow step (a restart makes a new one)."""

    def __init__(self, balancer: Balancer, spawn: Spawn) -> None:
        self.balancer = balancer
        self.metrics = LBMetrics()
        self.loop = _Loop(spawn)
        self.limits = Limits()
        self.mirror: Mirroring | None = None

    def give_back(self, replica: ReplicaState) -> None:
        """A slot a mirrored copy held is free again (the proxy's ``give_back``)."""
        self.balancer.release(replica)

    def apply(self, table: RouteTable) -> None:
        """The proxy's part of a new table: its limits and its shadow step."""
        self.limits = table.limits or Limits()
        self.mirror = mirroring_for(cast("Proxy", self), table.mirror, self.mirror)

    def close(self) -> None:
        """The process ended: its copies in flight are gone with it."""
        self.mirror = mirroring_for(cast("Proxy", self), None, self.mirror)

    def record(self, version: int, rid: int, status: int, elapsed: float) -> None:
        """Count one finished request as ``LBMetrics.record`` does (``rid`` 0 and
        ``version`` 0: the load balancer answered it itself)."""
        key = (version, rid, GET, status // 100, COMPLETED)
        requests = self.metrics.requests
        requests[key] = requests.get(key, 0) + 1
        buckets = self.metrics.latency.get(version)
        if buckets is None:
            buckets = self.metrics.latency[version] = [0.0] * BOTH_SLOTS
        buckets[bisect_left(LATENCY_BUCKETS, elapsed)] += 1
        buckets[SUM_SLOT] += elapsed
        if rid:
            buckets[SLOTS + bisect_left(TTFB_BUCKETS, elapsed)] += 1
            buckets[TTFB_SUM] += elapsed

    def answered(self, served: ReplicaState, nature: Nature, k: int, count: int) -> None:
        """A replica answered request ``k`` (its ``count``-th answer): the proxy offers
        it to the shadow step, as ``Proxy.response_complete`` does."""
        mirror = self.mirror
        if mirror is not None and served.version != mirror.version:
            mirror.offer(
                cast("Exchange", _Exchange(served, request_head(k))),
                cast("UpstreamConnection", _Upstream(nature, k, count)),
            )

    def report(self) -> dict[str, Any]:
        """The ``metrics`` of a load report, as lb/metrics.py's ``live_report`` makes it."""
        report = self.metrics.report()
        known = self.balancer.known.values()
        report["entry"] = ENDPOINT
        report["inflight_total"] = sum(r.inflight for r in known)
        report["queued"] = 0
        report["ejections"] = self.balancer.ejections
        return report
