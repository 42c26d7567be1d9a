"""A service runtime on simulated time: the fake backend (nothing listens), a clock the
test advances, probes the test answers, a load balancer that is only a record.

Real SQLite and the real runtime, planner and rollout; no sockets, no processes,
no wall-clock sleeps. Every wait of the runtime's tasks is a ``FakeClock.sleep``
(the simulator's clock, steadyserve/sim/clock.py) that returns only when the test
advances the clock past it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from steadyserve.backends.fake import FakeBackend, FakeReplica
from steadyserve.controller.pool_runtime import runtime_class
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.states import ReplicaStatus, ServiceStatus, UpdateMode, VersionOutcome
from steadyserve.home.paths import Home
from steadyserve.sim.clock import FakeClock
from steadyserve.spec import ReadinessProbe, ServiceSpec, parse_service
from steadyserve.store import ReplicaRow, ServiceRow, Store, VersionRow

SETTLE_ROUNDS = 50
# A binary fraction, so that steps add up to whole seconds exactly.
STEP_S = 0.125


class FakeLoadBalancer:
    """The runtime's LB process, reduced to what the runtime asks of it."""

    def __init__(self) -> None:
        self.running = True
        self.handle = None
        self.supervised = 0
        self.failure: str | None = None  # set when the LB could not start (never here)

    def supervise(self, store: Store, row: ServiceRow, workers: int | str = 1) -> None:
        self.supervised += 1

    def adopt(self, pid: int | None, create_time: float | None) -> None:
        pass

    def detach(self) -> None:
        pass

    async def stop(self) -> None:
        self.running = False


class Probes:
    """The answers to readiness probes, by port: (ready, why). Unset ports refuse."""

    def __init__(self) -> None:
        self.answers: dict[int, tuple[bool, str]] = {}
        self.default: tuple[bool, str] = (False, "connection refused")
        self.count = 0

    async def __call__(self, host: str, port: int, probe: ReadinessProbe) -> tuple[bool, str]:
        self.count += 1
        return self.answers.get(port, self.default)


def spec_of(fields: dict[str, Any], tmp_path: Path) -> ServiceSpec:
    command = {} if "pool" in fields else {"run": "serve"}  # a pool's jobs bring theirs
    return parse_service({"name": "svc", **command, **fields}, base_dir=tmp_path)


class World:
    """One home with one service ``svc``; runtimes are made (and re-made) over it."""

    def __init__(self, tmp_path: Path, fields: dict[str, Any]) -> None:
        self.tmp_path = tmp_path
        self.home = Home(tmp_path / "home").ensure()
        self.store = Store(self.home.db_path)
        self.backend = FakeBackend(self.home, serve=False)
        self.clock = FakeClock()
        self.probes = Probes()
        self.lb = FakeLoadBalancer()
        spec = spec_of(fields, tmp_path)
        row = ServiceRow(
            name="svc",
            status=ServiceStatus.CONTROLLER_INIT,
            version=1,
            created_at=self.clock.wall(),
            port=30001,
        )
        self.store.add_service(row, self.version_row(1, spec, UpdateMode.INITIAL))
        self.runtime = self.new_runtime()

    def version_row(
        self, number: int, spec: ServiceSpec, mode: UpdateMode, base_version: int | None = None
    ) -> VersionRow:
        return VersionRow(
            service="svc",
            version=number,
            created_at=self.clock.wall(),
            spec_json=spec.spec_json(),
            spec_yaml="",
            mode=mode,
            outcome=VersionOutcome.ACTIVE if number == 1 else VersionOutcome.IN_PROGRESS,
            base_version=base_version,
        )

    def new_runtime(self) -> ServiceRuntime:
        """A runtime as a (re)started controller makes it: from the store's rows."""
        row = self.store.service("svc")
        assert row is not None
        return runtime_class(self.store, row)(  # a pool's for a pool
            self.home,
            self.store,
            self.backend,
            None,  # type: ignore[arg-type]  # no HTTP: probes are injected
            "test",
            row,
            clock=self.clock,
            prober=self.probes,
            lb=self.lb,  # type: ignore[arg-type]
        )

    def add_version(
        self, number: int, fields: dict[str, Any], mode: UpdateMode = UpdateMode.ROLLING
    ) -> ServiceSpec:
        """Record version ``number`` as ``steady update`` does (an in-place one is
        applied onto the current version, its ``base_version``)."""
        spec = spec_of(fields, self.tmp_path)
        base = self.runtime.row.version if mode is UpdateMode.IN_PLACE else None
        self.store.add_version(self.version_row(number, spec, mode, base))
        return spec

    # driving -------------------------------------------------------------
    async def settle(self) -> None:
        """Let every task run until it waits on the clock (no wall-clock time passes)."""
        for _ in range(SETTLE_ROUNDS):
            await asyncio.sleep(0)

    async def tick(self, times: int = 1) -> None:
        for _ in range(times):
            self.runtime.tick()
            await self.settle()

    async def advance(self, seconds: float, step: float = STEP_S) -> None:
        """Advance the clock in steps, ticking and settling after each."""
        for _ in range(round(seconds / step)):
            self.clock.advance(step)
            await self.settle()
            await self.tick()

    async def until(
        self, what: str, done: Callable[[], bool], seconds: float = 30.0, step: float = STEP_S
    ) -> None:
        """Advance simulated time until ``done`` (bounded: ``seconds`` of it)."""
        for _ in range(round(seconds / step)):
            if done():
                return
            await self.advance(step, step)
        assert done(), f"not {what} within {seconds} simulated seconds: {self.describe()}"

    def describe(self) -> list[tuple[int, int, str]]:
        return [(r.id, r.version, r.status.value) for r in self.replicas()]

    # looking -------------------------------------------------------------
    def replicas(self, status: ReplicaStatus | None = None) -> list[ReplicaRow]:
        rows = sorted(self.runtime.replicas.values(), key=lambda r: r.id)
        return [r for r in rows if status is None or r.status is status]

    def process(self, replica: ReplicaRow) -> FakeReplica:
        assert replica.pid is not None
        return self.backend.replicas[replica.pid]

    def answer_all(self, ok: bool, why: str = "") -> None:
        """Every replica started so far answers its probes ``ok``."""
        for proc in self.backend.replicas.values():
            self.probes.answers[proc.port] = (ok, why or ("ok" if ok else "answered 503"))

    def events(self, kind: str) -> list[str]:
        return [e.reason for e in self.store.events("svc", limit=1000) if e.to_status == kind]

    def routed(self) -> list[int]:
        return [r["id"] for r in self.runtime.routes.table.get("replicas", [])]


def run(world: World, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run one scenario on a fresh event loop (it cancels what is left), then close the store."""
    try:
        asyncio.run(scenario())
    finally:
        world.store.close()
