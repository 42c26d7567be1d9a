"""The narrow ports the replica helpers reach the runtime through: never the whole runtime.

Provisioning (provisioning.py), probing (probing.py), re-adoption (readopt.py),
draining (draining.py) and exits (exits.py) each carry out one part of a replica's life;
the update in flight (rollout/) steers the fleet through :class:`RolloutPort`. What
all of them need of the service's runtime is :class:`ReplicaPort`: the rows,
the store and the clock, the one way a state changes (``transition``,
``mark_failed``), tasks tied to a replica (``spawn``) and a nudge of the loop
(``wake``); each helper's own port adds the few members only it uses. So a
helper is read, and tested with any object of that shape, without the other
members of ``ServiceRuntime``, and the helpers do not import the runtime that
imports them (tests/unit/test_controller_imports.py). ``ServiceRuntime``
implements every port; mypy checks it at each call that hands ``self`` to a helper.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from steadyserve.backends.base import Backend, ReplicaHandle
from steadyserve.controller.capacity import CapacityPool
from steadyserve.controller.clock import Clock
from steadyserve.controller.fixed_ports import PortWatch
from steadyserve.controller.replica_env import ReplicaEnvironment
from steadyserve.controller.routes import RoutePublisher
from steadyserve.core.planner import Plan
from steadyserve.core.states import ReplicaStatus
from steadyserve.home.paths import Home
from steadyserve.spec import ReadinessProbe, ServiceSpec
from steadyserve.store import ReplicaRow, ServiceRow, Store

Prober = Callable[[str, int, ReadinessProbe], Awaitable[tuple[bool, str]]]
"""Probe ``host:port`` once: (ready, why not). The real one is an HTTP GET."""

ReplicaTask = Coroutine[Any, Any, None]
"""What :meth:`ReplicaPort.spawn` runs: a coroutine cancelled with its replica."""


@dataclass
class HeldReplica:
    """What the controller holds for a replica beyond its row."""

    handle: ReplicaHandle | None = None
    started_at: float | None = None
    failed_probes: int = 0
    draining_since: float | None = None
    """When its drain began (the clock's monotonic time); None while it serves."""
    log_read: int = 0
    """How far a pool worker's log was read for its ready line (probing.py)."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ReplicaPort(Protocol):
    """What every replica helper may ask of its service's runtime."""

    name: str
    store: Store
    clock: Clock
    replicas: dict[int, ReplicaRow]
    """The service's replica rows by id (the runtime's own: never a copy)."""

    @property
    def spec(self) -> ServiceSpec:
        """The target version's spec."""
        ...

    def spec_for(self, version: int) -> ServiceSpec: ...

    def hold(self, replica_id: int) -> HeldReplica: ...

    def spawn(self, replica: ReplicaRow, coro: ReplicaTask) -> None:
        """Run a task for the replica, cancelled when the replica fails or goes."""
        ...

    def transition(
        self, replica: ReplicaRow, new: ReplicaStatus, reason: str, **values: Any
    ) -> None:
        """The one way a replica's state changes (checked, written, an event)."""
        ...

    def mark_failed(self, replica: ReplicaRow, status: ReplicaStatus, reason: str) -> None:
        """Out of routing at once, its process stopped, kept listed."""
        ...

    def judge_version(self, version: int) -> None:
        """A replica of ``version`` failed before it was ready: is the version broken?"""
        ...

    def wake(self) -> None:
        """Reconcile now rather than at the next tick."""
        ...


class ProbePort(ReplicaPort, Protocol):
    """Probing (probing.py): the prober, and what a probe's verdict changes."""

    prober: Prober
    environment: ReplicaEnvironment
    """The control port's secret headers (Python replicas)."""
    port_watch: PortWatch

    def version_served(self, version: int) -> None:
        """A replica of ``version`` turned READY: the version serves, it is not broken."""
        ...

    def publish_now(self) -> None:
        """Publish the routable replicas at once (one left routing between ticks)."""
        ...

    async def learn_models(self, replica: ReplicaRow) -> None:
        """Read a Python replica's models before it turns READY (multiplexing)."""
        ...

    async def deliver_user_config(
        self, replica: ReplicaRow, *, replace_on_refusal: bool = False
    ) -> tuple[bool, str]:
        """Hand a new replica its version's ``user_config`` before it serves."""
        ...


class LaunchPort(ProbePort, Protocol):
    """Provisioning (provisioning.py): the backend, the machine's room, the files."""

    home: Home
    backend: Backend
    capacity: CapacityPool
    """The machine's room, shared with every service of the controller."""
    waiting: dict[int, str]
    """PENDING replicas that do not fit yet, and what they miss (status notices)."""

    def target_replicas(self) -> int: ...

    async def retire(self, replica: ReplicaRow, reason: str) -> None:
        """Drain, then stop and forget."""
        ...


class AdoptPort(ProbePort, Protocol):
    """Re-adoption (readopt.py): find each process again, resume what it was doing."""

    backend: Backend

    async def retire(self, replica: ReplicaRow, reason: str) -> None: ...

    async def stop_failed(self, replica: ReplicaRow, handle: ReplicaHandle) -> None: ...


class Running(Protocol):
    """The part of the load-balancer process a drain asks about."""

    @property
    def running(self) -> bool: ...


class DrainPort(ReplicaPort, Protocol):
    """Draining (draining.py): the route table's acknowledgements, then the stop."""

    backend: Backend
    held: dict[int, HeldReplica]
    capacity: CapacityPool
    port_watch: PortWatch
    routes: RoutePublisher

    @property
    def lb(self) -> Running: ...


class ExitPort(ReplicaPort, Protocol):
    """Exits (exits.py): each replica's process handle, its log, the route table."""

    home: Home
    held: dict[int, HeldReplica]

    def publish_now(self) -> None: ...


class RolloutPort(ReplicaPort, Protocol):
    """The update in flight (rollout/): the service's row and version, the plan it
    steers, and the few actions an update takes (launch, stop a setup, publish)."""

    row: ServiceRow
    plan: Plan
    """The last reconcile pass's plan (what the update's analysis reads)."""
    broken_versions: set[int]
    ready_versions: set[int]
    """Versions a replica of which was READY: proven, by the early-failure rule."""
    capacity: CapacityPool
    routes: RoutePublisher
    """The load balancer's in-flight counts: scale-down stops the idle first."""
    environment: ReplicaEnvironment
    probe_session: aiohttp.ClientSession
    """For ``user_config`` deliveries in place (rollout/in_place.py)."""
    failure_reasons: dict[int, str]
    """Why each failed replica failed: an in-place update's refusal names it."""

    def target_replicas(self) -> int: ...

    def set_version(self, version: int, spec: ServiceSpec | None = None) -> None:
        """Make ``version`` the target: the spec new replicas get and probes use."""
        ...

    def launch(self, version: int) -> None:
        """Start a replica of ``version`` now."""
        ...

    def stop_setup(self, version: int, why: str) -> None:
        """Cut short a version's environment build (its update ended)."""
        ...

    def version_served(self, version: int) -> None:
        """A replica of ``version`` serves (an in-place relabel): the version is not broken."""
        ...

    def publish_now(self) -> None: ...
