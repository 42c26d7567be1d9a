"""The simulated machine a run's controller manages: replicas that exist only as
records (with the faults a schedule gives them), the probes and ``user_config``
posts they answer, and the controller itself with those injected.

The controller is the real :class:`~steadyserve.controller.daemon.Controller` for its
commands (update, rollback, its command lock) and the real runtime for everything
else; only what would touch the machine is replaced: the backend (no process), the
prober and the reconfigure post (no socket), the load balancer's process (a record;
sim/traffic.py routes), the machine's inventory (no GPU query).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from steadyserve.backends.base import LaunchRequest, ReplicaHandle
from steadyserve.backends.fake import FakeBackend, FakeReplica
from steadyserve.controller import startup
from steadyserve.controller.capacity import CapacityPool
from steadyserve.controller.daemon import Controller
from steadyserve.controller.endpoint import FIRST_ENDPOINT_PORT, EndpointClaims
from steadyserve.controller.metrics import Observer
from steadyserve.controller.pool_runtime import runtime_class
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.capacity import Inventory
from steadyserve.core.states import ReplicaStatus
from steadyserve.home.paths import Home
from steadyserve.sim.answers import Nature
from steadyserve.sim.clock import FakeClock
from steadyserve.sim.machine import SimMachine
from steadyserve.spec import ReadinessProbe
from steadyserve.store import ServiceRow, Store


@dataclass
class Process:
    """A simulated replica process: when it serves, and what ails it."""

    born: float
    start_delay: float
    never_starts: bool = False
    hung_until: float = 0.0
    probe_fail_until: float = 0.0
    crashed: bool = False
    """Ended by a fault (not by the controller's stop)."""
    nature: Nature = field(default_factory=Nature)
    """How its version answers (sim/answers.py), read from its ``run`` command."""
    answers: int = 0
    """Answers it gave so far (a noisy version's ``$.at``)."""

    def started(self, now: float) -> bool:
        return not self.never_starts and now >= self.born + self.start_delay


class SimBackend(FakeBackend):
    """The fake backend (nothing listens, a replica is a record) with faults at launch."""

    START_DELAY_S = 2.0

    def __init__(self, home: Home, clock: FakeClock) -> None:
        super().__init__(home, serve=False)
        self.clock = clock
        self.processes: dict[int, Process] = {}
        self.by_port: dict[int, FakeReplica] = {}
        self.next_faults: deque[dict[str, Any]] = deque()
        """Faults the next launched replicas get, in order (never/slow start)."""
        self.stopped_by_controller: set[int] = set()
        self.drained: set[int] = set()
        """Pids stopped after a drain (SHUTTING_DOWN), not for failing: the drain
        handshake promised the load balancer no longer routes to them."""
        self.status_of: Callable[[int], ReplicaStatus | None] = lambda pid: None
        self.faulted: Callable[[LaunchRequest], bool] = lambda request: True
        """Whether a launch takes the next start fault (the runner: its service's only)."""
        self.on_spawn: Callable[[], None] | None = None
        """Called once, when the next replica's process exists and before the launch
        returns its pid: a controller killed there leaves a process no row names."""

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        replica = await super().launch(request)
        assert isinstance(replica, FakeReplica)
        fault = self.next_faults.popleft() if self.next_faults and self.faulted(request) else {}
        self.processes[replica._pid] = Process(
            born=self.clock.now(),
            start_delay=float(fault.get("delay_s", self.START_DELAY_S)),
            never_starts=fault.get("kind") == "never_start",
            nature=Nature.of(request.command[-1] if request.command else ""),
        )
        self.by_port[replica.port] = replica
        # The local backend opens the replica's log before it starts the process: a
        # restored state raises its next replica id past every log (recovery.py).
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        request.log_path.touch()
        if self.on_spawn is not None:
            spawned, self.on_spawn = self.on_spawn, None
            spawned()  # SIGKILL of the controller: this task ends here too
            raise asyncio.CancelledError
        return replica

    def reap_isolation(self, keep: set[str]) -> None:
        """No namespace to reap: the fake backend's would be the machine's own."""

    async def stop(self, handle: ReplicaHandle, timeout_s: float) -> None:
        if isinstance(handle, FakeReplica) and handle.exit_code() is None:
            self.stopped_by_controller.add(handle._pid)
            if self.status_of(handle._pid) is ReplicaStatus.SHUTTING_DOWN:
                self.drained.add(handle._pid)
        await super().stop(handle, timeout_s)

    def alive(self, pid: int) -> bool:
        replica = self.replicas.get(pid)
        return replica is not None and replica.exit_code() is None

    def serving(self, pid: int) -> bool:
        """Whether a request sent to the replica now would be answered 200."""
        proc = self.processes[pid]
        now = self.clock.now()
        return (
            self.alive(pid)
            and proc.started(now)
            and now >= proc.hung_until
            and now >= proc.probe_fail_until
        )

    def faulty(self, pid: int) -> bool:
        """Ailing by the schedule's doing (a failure it causes is no controller's fault)."""
        proc = self.processes[pid]
        now = self.clock.now()
        return (
            proc.crashed
            or proc.never_starts
            or now < proc.hung_until
            or now < proc.probe_fail_until
        )


class SimProber:
    """The readiness probe, answered by the simulated process behind the port."""

    def __init__(self, backend: SimBackend, clock: FakeClock) -> None:
        self.backend = backend
        self.clock = clock

    async def __call__(self, host: str, port: int, probe: ReadinessProbe) -> tuple[bool, str]:
        replica = self.backend.by_port.get(port)
        if replica is None or replica.exit_code() is not None:
            return False, "connection refused"
        proc = self.backend.processes[replica._pid]
        now = self.clock.now()
        if now < proc.hung_until:  # no answer: the probe times out
            await self.clock.sleep(probe.timeout_seconds)
            return False, f"no answer within timeout_seconds={probe.timeout_seconds:g}"
        if not proc.started(now):
            return False, "connection refused"
        if now < proc.probe_fail_until:
            return False, "answered 503"
        return True, "ok"


class SimConfigPost:
    """``post_user_config`` without a socket: the replica takes or refuses the config."""

    def __init__(self, backend: SimBackend) -> None:
        self.backend = backend
        self.refused: Any = None
        """The ``user_config`` of the schedule's in-place update that every replica refuses."""

    async def __call__(
        self, session: Any, ip: str, port: int, path: str, user_config: Any, **_: Any
    ) -> tuple[bool, bool, str]:
        await asyncio.sleep(0)  # an await point, as the real post has
        replica = self.backend.by_port.get(port)
        if replica is None or not self.backend.serving(replica._pid):
            return False, False, "connection refused"
        if self.refused is not None and user_config == self.refused:
            return False, True, f"{path} answered 500"
        return True, True, ""


class SimLoadBalancerProcess:
    """What the runtime asks of its load balancer's process; routing is sim/traffic.py's."""

    def __init__(self) -> None:
        self.running = True
        self.handle = None
        self.failure: str | None = None
        self.tls_env: dict[str, str] = {}

    def supervise(self, store: Store, row: ServiceRow, workers: int | str = 1) -> None:
        pass

    def adopt(self, pid: int | None, create_time: float | None) -> None:
        pass

    def detach(self) -> None:
        pass

    async def stop(self) -> None:
        self.running = False


class SimEndpointClaims(EndpointClaims):
    """Endpoint ports claimed without a socket: the simulated machine has no other
    home to claim them against."""

    def __init__(self) -> None:
        super().__init__()
        self.claimed: set[int] = set()

    def choose(self, store: Store, requested: int | None) -> int:
        taken = self.claimed | {r.port for r in store.services()}
        port = requested or next(p for p in itertools.count(FIRST_ENDPOINT_PORT) if p not in taken)
        self.claimed.add(port)
        return port

    def hold(self, port: int) -> bool:
        self.claimed.add(port)
        return True

    def release(self, port: int) -> None:
        self.claimed.discard(port)


class SimGateway:
    """No gateway: no service of a run has a route prefix, a fleet deploy names no port."""

    def __init__(self) -> None:
        self.pids: set[int] = set()

    def check_port(self, port: int | None) -> str | None:
        return None

    async def configure(self, port: int | None, request_timeout_s: float | None = None) -> None:
        pass


_TICKED: dict[type[ServiceRuntime], type[ServiceRuntime]] = {}


def _ticked(cls: type[ServiceRuntime]) -> type[ServiceRuntime]:
    """``cls`` whose ``start`` (a service created by a command) only re-adopts: the
    runner ticks every runtime's reconcile loop, on the simulated clock."""
    if cls not in _TICKED:
        _TICKED[cls] = type(f"Ticked{cls.__name__}", (cls,), {"start": cls.resume})
    return _TICKED[cls]


class SimController(Controller):
    """The real controller's commands over the simulated machine.

    Built without :meth:`Controller.__init__`'s machine (no backend chosen from the
    environment, no GPU query, no gateway process, no listening socket); what
    :meth:`Controller.serve` does at start besides listening is the real start's
    (controller/startup.py), run by :meth:`start`: the services taken over (their
    replicas re-adopted; the runner ticks their reconcile loops), the orphan sweep
    over the simulated processes, the backups kept."""

    _incarnation = itertools.count(1)

    def __init__(
        self,
        home: Home,
        clock: FakeClock,
        backend: SimBackend,
        prober: SimProber,
        lbs: dict[str, SimLoadBalancerProcess],
        life: int,
        machine: SimMachine,
    ) -> None:
        self.home = home
        self.clock = clock
        self.store = Store(home.db_path)
        self.backend = backend
        self.backend_name = "sim"
        self.epoch = f"life{life}"
        self._incarnations = itertools.count(1)
        self.services: dict[str, ServiceRuntime] = {}
        self.started_at = clock.wall()
        self.url = ""
        self._stop = asyncio.Event()
        self._down_tasks: dict[str, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.endpoints = SimEndpointClaims()
        self.gateway = SimGateway()  # type: ignore[assignment]
        self.machine = machine
        self._resumed_downs: list[asyncio.Task[None]] = []
        self.capacity = CapacityPool(Inventory(gpus=(), cores=(0, 1)), self._all_replicas)
        self.probe_session = None  # type: ignore[assignment]  # no HTTP: probes are injected
        self._prober = prober
        self._lbs = lbs
        """Each service's load balancer process (they outlive a controller)."""
        # What the API's ``dashboard.add_routes`` makes: the load reports' counters,
        # which the canary's analysis and shadow verdict read (controller/lb_report.py).
        self.observer = Observer(self)

    def _new_runtime(self, row: ServiceRow) -> ServiceRuntime:
        lb = self._lbs.get(row.name)
        if lb is None or not lb.running:  # a new service (or a name taken again): a new one
            lb = self._lbs[row.name] = SimLoadBalancerProcess()
        runtime = _ticked(runtime_class(self.store, row))(
            self.home,
            self.store,
            self.backend,
            None,  # type: ignore[arg-type]
            f"{self.epoch}.{next(self._incarnations)}",
            row,
            clock=self.clock,
            prober=self._prober,
            lb=lb,  # type: ignore[arg-type]
            capacity=self.capacity,
        )
        self.services[row.name] = runtime
        return runtime

    async def start(self) -> None:
        """What a (re)started controller does before it serves: the real start."""
        known, claimed = startup.take_over(self, ServiceRuntime.resume)
        await startup.sweep(self, known, claimed)
