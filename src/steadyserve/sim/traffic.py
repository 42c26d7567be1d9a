"""The simulated load balancer and its clients.

The load balancer is the real :class:`~steadyserve.lb.balancer.Balancer` (policies,
per-version weights, ejection) fed as the real one is fed: a long-poll of the
runtime's :class:`~steadyserve.controller.routes.RoutePublisher` with ``known=``
(its acknowledgement, which draining waits for) and a load report every half
second (in-flight counts for draining, request counts for autoscaling). Only the
sockets are gone: the poll is the publisher's ``wait`` awaited directly, a
request is a slot taken with ``choose`` and given back with ``release``, and a
report is handed to the controller's own entry for reports (controller/lb_report.py,
what the API calls): draining, autoscaling, the counters and the canary's analysis
and shadow verdict are fed by the code a real report feeds. The report carries the
proxy's counters and its shadow step's counts (sim/lb_proxy.py: the real
``LBMetrics`` and ``Mirroring``).

A client request (``GET /items/k``, ``k`` counting every request of the run) is
sent on a step and answered a few steps later, as its replica's version answers it
(sim/answers.py). It fails when no replica is eligible, when the replica it was
routed to does not answer (its process ended, hangs, or answers 503), or when its
version answers it 500; a connection refused is retried once on another replica,
as the real proxy does before any byte was sent. Each is counted as the real load
balancer counts it, and each answer is offered to the shadow step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from steadyserve.controller.lb_report import take_report
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.shadow.verdict import Tally
from steadyserve.lb.balancer import Balancer, ReplicaState
from steadyserve.sim.clock import FakeClock
from steadyserve.sim.lb_proxy import SimProxy
from steadyserve.sim.schedule import STEP_S
from steadyserve.sim.world import SimBackend
from steadyserve.wire.load_report import LoadReport
from steadyserve.wire.routes import RouteTable

if TYPE_CHECKING:
    from steadyserve.controller.metrics import Observer

POLL_WAIT_S = 25.0
REPORT_EVERY_S = 0.5
RETRY_AFTER_S = 0.2
DELIVERY_S = 0.1
"""A new table reaches the load balancer this long after it is published: within the
next step, so a replica stopped before the load balancer acknowledged its removal
still gets requests meanwhile, as it would on a real machine."""
LB_PID = 4_000_000
ANSWERED_500 = "its version answered 500"
"""Why a request failed that its version failed (sim/answers.py): no fault of the
controller's, as a real client would see it too."""


@dataclass
class Request:
    replica: ReplicaState
    balancer: Balancer
    pid: int
    ends: int
    """The step it is answered on."""
    k: int = 0
    """Its number: ``GET /items/k``."""
    sent: int = 0
    target: int | None = None
    """The version the load balancer's table mirrored to at weight 0 when it was
    routed, or None: a request routed while its version still had client weight
    (before a restored state made that version a canary's shadow target again) is
    no client reaching the shadow target."""


class SimLoadBalancer:
    """One load balancer worker: the real balancer, the poll and the report."""

    def __init__(self, clock: FakeClock, spawn: Callable[..., asyncio.Task[None]]) -> None:
        self.clock = clock
        self._spawn = spawn
        self.generation = 0
        self.balancer = Balancer(None, clock=clock.now)
        self.proxy = SimProxy(self.balancer, spawn)
        self.known = ""
        self.worker = "lb-1"
        self._tasks: list[asyncio.Task[None]] = []
        self.runtime: ServiceRuntime | None = None
        self.observer: Observer | None = None
        self.retired: dict[int, Tally] = {}
        """Shadow counts of the processes before a restart, per new version."""

    def attach(self, runtime: ServiceRuntime, observer: Observer) -> None:
        """Follow ``runtime``'s table (a controller started: its address is new)."""
        self.detach()
        self.runtime, self.observer = runtime, observer
        self._tasks = [self._spawn(self._poll(runtime)), self._spawn(self._report(runtime))]

    def detach(self) -> None:
        """The controller is gone: its connections break; the last table stays."""
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        self.runtime = None

    def restart(self) -> None:
        """A new load balancer process: no table, no counts, a new worker id."""
        runtime, observer = self.runtime, self.observer
        self.detach()
        self.proxy.close()
        for version, counts in self.proxy.metrics.shadow.items():
            tally = Tally.from_json(counts.to_json())
            self.retired[version] = self.retired.get(version, Tally()).plus(tally)
        self.generation += 1
        self.balancer = Balancer(None, clock=self.clock.now)
        self.proxy = SimProxy(self.balancer, self._spawn)
        self.known = ""
        self.worker = f"lb-{self.generation + 1}"
        if runtime is not None and observer is not None:
            self.attach(runtime, observer)

    def shadow(self, version: int) -> Tally:
        """Every shadow count for ``version`` so far, over every load balancer process
        (what the controller would have were no report ever late or lost)."""
        counts = self.proxy.metrics.shadow.get(version)
        now = Tally() if counts is None else Tally.from_json(counts.to_json())
        return self.retired.get(version, Tally()).plus(now)

    def mirror_target(self) -> int | None:
        """The version the table in force mirrors to, at weight 0 for clients."""
        table = self.balancer.table
        if table is None or table.mirror is None:
            return None
        weight = dict(table.weights).get(table.mirror.version, 0)
        return table.mirror.version if weight == 0 else None

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
                self.proxy.apply(table)
                self.known = table.key

    async def _report(self, runtime: ServiceRuntime) -> None:
        while True:
            snap = self.balancer.snapshot()
            report = LoadReport(
                table=str(snap["table"]),
                inflight={int(k): int(v) for k, v in snap["inflight"].items()},
                requests={int(k): int(v) for k, v in snap["requests"].items()},
                errors={int(k): int(v) for k, v in snap["errors"].items()},
                worker=self.worker,
                lb_pid=LB_PID + self.generation,
                metrics=self.proxy.report(),
                time=self.clock.wall(),
            )
            assert self.observer is not None
            # As the API hands it over: the report, and the JSON it was read from.
            take_report(runtime, self.observer, report, report.to_json())
            await self.clock.sleep(REPORT_EVERY_S)


@dataclass
class Outcome:
    """One step's traffic: answered, failed (and why), and where each went."""

    ok: int = 0
    failed: int = 0
    routed: list[tuple[int, int]] = field(default_factory=list)
    """(replica id, pid) of every request routed this step (each try)."""
    failures: list[tuple[str, int | None]] = field(default_factory=list)
    """(why, pid or None) of every failed request."""
    answered: list[tuple[int, int, int | None]] = field(default_factory=list)
    """(version, replica id, the version the load balancer's table mirrored to at
    weight 0 when the request was routed, or None) of every request a replica
    answered this step."""


class Clients:
    """Requests sent every step through the load balancer to the simulated replicas."""

    def __init__(self, lb: SimLoadBalancer, backend: SimBackend) -> None:
        self.lb = lb
        self.backend = backend
        self.per_step = 2
        self.open: list[Request] = []
        self._n = 0
        self._target: int | None = None

    def step(self, step: int) -> Outcome:
        out = Outcome()
        self._target = self.lb.mirror_target()  # tables change between steps only
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
            self._answer(request, step, out)
        self.open = still
        balancer, proxy = self.lb.balancer, self.lb.proxy
        for _ in range(self.per_step):
            self._n += 1
            tried: set[int] = set()
            while True:
                replica = balancer.choose(tried)
                if replica is None:
                    out.failed += 1
                    out.failures.append(("no eligible replica", None))
                    proxy.record(0, 0, 503, 0.001)
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
                    proxy.record(replica.version, replica.id, 502, STEP_S)
                    break
                ends = step + self._n % 3
                self.open.append(Request(replica, balancer, pid, ends, self._n, step, self._target))
                break
        return out

    def _answer(self, request: Request, step: int, out: Outcome) -> None:
        """The replica's answer to ``request``, as its version answers it; counted,
        and offered to the shadow step."""
        replica, pid, proxy = request.replica, request.pid, self.lb.proxy
        elapsed = max(0.001, (step - request.sent) * STEP_S)
        if not self.backend.serving(pid):
            out.failed += 1
            out.failures.append(("replica stopped answering", pid))
            proxy.record(replica.version, replica.id, 502, elapsed)
            return
        proc = self.backend.processes[pid]
        proc.answers += 1
        status = 500 if proc.nature.fails(request.k) else 200
        proxy.record(replica.version, replica.id, status, elapsed)
        out.answered.append((replica.version, replica.id, request.target))
        if status >= 500:
            replica.errors += 1
            out.failed += 1
            out.failures.append((ANSWERED_500, pid))
        else:
            out.ok += 1
        proxy.answered(replica, proc.nature, request.k, proc.answers)
