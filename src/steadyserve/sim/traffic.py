"""The simulated load balancer and its clients.

The load balancer is the real :class:`~steadyserve.lb.balancer.Balancer` (policies,
per-version weights, ejection) fed as the real one is fed: a long-poll of the
runtime's :class:`~steadyserve.controller.routes.RoutePublisher` with ``known=``
(its acknowledgement, which draining waits for) and a load report every half
second (in-flight counts for draining, request counts for autoscaling). Only the
sockets are gone: the poll is the publisher's ``wait`` awaited directly, and a
request is a slot taken with ``choose`` and given back with ``release``.

A client request is sent on a step and answered a few steps later. It fails when
no replica is eligible, or when the replica it was routed to does not answer (its
process ended, hangs, or answers 503); a connection refused is retried once on
another replica, as the real proxy does before any byte was sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.lb.balancer import Balancer, ReplicaState
from steadyserve.sim.clock import FakeClock
from steadyserve.sim.world import SimBackend
from steadyserve.wire.routes import RouteTable

POLL_WAIT_S = 25.0
REPORT_EVERY_S = 0.5
RETRY_AFTER_S = 0.2
DELIVERY_S = 0.1
"""A new table reaches the load balancer this long after it is published: within the
next step, so a replica stopped before the load balancer acknowledged its removal
still gets requests meanwhile, as it would on a real machine."""
LB_PID = 4_000_000


@dataclass
class Request:
    replica: ReplicaState
    balancer: Balancer
    pid: int
    ends: int
    """The step it is answered on."""


class SimLoadBalancer:
    """One load balancer worker: the real balancer, the poll and the report."""

    def __init__(self, clock: FakeClock, spawn: Callable[..., asyncio.Task[None]]) -> None:
        self.clock = clock
        self._spawn = spawn
        self.generation = 0
        self.balancer = Balancer(None, clock=clock.now)
        self.known = ""
        self.worker = "lb-1"
        self._tasks: list[asyncio.Task[None]] = []
        self.runtime: ServiceRuntime | None = None

    def attach(self, runtime: ServiceRuntime) -> None:
        """Follow ``runtime``'s table (a controller started: its address is new)."""
        self.detach()
        self.runtime = runtime
        self._tasks = [self._spawn(self._poll(runtime)), self._spawn(self._report(runtime))]

    def detach(self) -> None:
        """The controller is gone: its connections break; the last table stays."""
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        self.runtime = None

    def restart(self) -> None:
        """A new load balancer process: no table, no counts, a new worker id."""
        runtime = self.runtime
        self.detach()
        self.generation += 1
        self.balancer = Balancer(None, clock=self.clock.now)
        self.known = ""
        self.worker = f"lb-{self.generation + 1}"
        if runtime is not None:
            self.attach(runtime)

    async def _poll(self, runtime: ServiceRuntime) -> None:
        while True:
            data = await runtime.routes.wait(self.known, POLL_WAIT_S, self.worker)
            if runtime.routes.closed:
                return
            if data is None:  # 503: nothing published yet
                await self.clock.sleep(RETRY_AFTER_S)
                continue
            table = RouteTable.from_json(data)
            await self.clock.sleep(DELIVERY_S)  # the answer's way back over the network
            if table.key != self.known:
                self.balancer.apply(table)
                self.known = table.key

    async def _report(self, runtime: ServiceRuntime) -> None:
        while True:
            snap = self.balancer.snapshot()
            inflight = {int(k): int(v) for k, v in snap["inflight"].items()}
            requests = {int(k): int(v) for k, v in snap["requests"].items()}
            raw = {"worker": self.worker}
            inflight, requests, queued, _ = runtime.routes.report(
                str(snap["table"]), inflight, requests, 0, raw
            )
            views = {key: view.requests for key, view in runtime.routes.workers.items()}
            runtime.autoscaler.load.lb_report(
                runtime.clock.now(), inflight, requests, queued, LB_PID + self.generation, views
            )
            await self.clock.sleep(REPORT_EVERY_S)


@dataclass
class Outcome:
    """One step's traffic: answered, failed (and why), and where each went."""

    ok: int = 0
    failed: int = 0
    routed: list[tuple[int, int]] | None = None
    """(replica id, pid) of every request routed this step (each try)."""
    failures: list[tuple[str, int | None]] | None = None
    """(why, pid or None) of every failed request."""


class Clients:
    """Requests sent every step through the load balancer to the simulated replicas."""

    def __init__(self, lb: SimLoadBalancer, backend: SimBackend) -> None:
        self.lb = lb
        self.backend = backend
        self.per_step = 2
        self.open: list[Request] = []
        self._n = 0

    def step(self, step: int) -> Outcome:
        out = Outcome(routed=[], failures=[])
        assert out.routed is not None and out.failures is not None
        still: list[Request] = []
        for request in self.open:
            if request.balancer is not self.lb.balancer:  # its LB process restarted
                out.failed += 1
                out.failures.append(("load balancer restarted", None))
                continue
            if request.ends > step:
                still.append(request)
                continue
            request.balancer.release(request.replica)
            if self.backend.serving(request.pid):
                out.ok += 1
            else:
                out.failed += 1
                out.failures.append(("replica stopped answering", request.pid))
        self.open = still
        balancer = self.lb.balancer
        for _ in range(self.per_step):
            self._n += 1
            tried: set[int] = set()
            while True:
                replica = balancer.choose(tried)
                if replica is None:
                    out.failed += 1
                    out.failures.append(("no eligible replica", None))
                    break
                pid = self.backend.by_port[replica.port]._pid
                out.routed.append((replica.id, pid))
                replica.requests += 1
                if not self.backend.alive(pid) and not tried:  # refused: retried once
                    balancer.release(replica)
                    balancer.eject(replica)
                    tried.add(replica.id)
                    continue
                if not self.backend.serving(pid):
                    balancer.release(replica)
                    replica.errors += 1
                    out.failed += 1
                    out.failures.append(("replica did not answer", pid))
                    break
                self.open.append(Request(replica, balancer, pid, step + self._n % 3))
                break
        return out
