"""The contract between the controller and wherever replicas run.

The controller decides; a backend carries out. The backend owns placement, the
replica's address (host and port: it allocates them), the part of the
environment that says where to listen (``PORT``, ``STEADY_CONTROL_PORT``),
start, stop, liveness and logs. The runtime owns states and decisions and never
picks a port. ``local`` runs replicas as subprocesses, ``ray`` as actors on a Ray
cluster, ``fake`` in memory for the simulated-time tests, all behind the same
calls (docs/design.md, "The backend seam").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from steadyserve.spec import Resources


@dataclass(frozen=True)
class AdoptRequest:
    """A replica a previous controller started, as its row recorded it: found again
    by its pid locally, by ``service`` and ``replica_id`` where replicas are named
    (Ray actors)."""

    pid: int
    create_time: float | None
    host: str
    port: int
    control_port: int | None
    service: str = ""
    replica_id: int = 0
    netns: str | None = None
    """The replica's network namespace (``service.isolation``), or None."""


class ProvisionError(Exception):
    """A version could not be prepared (workdir copy or setup failed); one line."""


@dataclass(frozen=True)
class LaunchRequest:
    """One replica to start. ``env`` is everything but the address: the backend adds
    ``PORT`` (and ``STEADY_CONTROL_PORT`` when ``control_port`` is asked for)."""

    service: str
    version: int
    replica_id: int
    command: list[str]
    env: dict[str, str]
    workdir: Path
    log_path: Path
    control_port: bool = False
    """A Python replica: its runner also listens on a control port."""
    setup: str | None = None
    """The version's ``setup``: a backend that places replicas on other machines
    runs it there (once per node); the local backend ran it in ``prepare``."""
    pip: list[str] | str | None = None
    resources: Resources | None = None
    """What one replica needs: placement for backends that place (Ray)."""
    fixed_port: int | None = None
    """SkyServe's fixed replica port (``run`` ignores ``$PORT``): a backend with
    several nodes runs at most one such replica per node, on that port."""
    cores: tuple[int, ...] = ()
    """The cores the replica is pinned to (``resources.pin_cpus``); () runs it anywhere."""
    isolate: bool = False
    """``service.isolation`` resolved to ``network``: the replica gets its own
    network namespace where the backend can make one (docs/isolation.md)."""
    setup_in_log: bool = True
    """The log starts with the version's setup output (a replica's does; a pool's
    job, which runs after its worker's setup, logs only its own output)."""


class ReplicaHandle(Protocol):
    @property
    def pid(self) -> int | None: ...

    @property
    def create_time(self) -> float | None: ...

    @property
    def host(self) -> str:
        """Where the load balancer and the probes reach the replica."""

    @property
    def port(self) -> int:
        """The port the replica serves on."""

    @property
    def control_port(self) -> int | None:
        """A Python replica's runner control port (health, reconfigure), else None."""

    @property
    def preempted(self) -> bool:
        """True when the replica was lost with its machine (a Ray node died), not by a
        fault of its own: replaced without counting against its version."""

    def exit_code(self) -> int | None:
        """None while the replica runs, else its exit code (-N for signal N)."""


class Backend(Protocol):
    places: bool
    """Whether replicas run on this machine, whose GPUs, cores and fixed ports the
    controller divides among them (False: Ray places its actors itself)."""

    def isolation_unavailable(self) -> str | None:
        """Why a replica cannot have a network namespace of its own here
        (``service.isolation``), or None when it can."""

    def reap_isolation(self, keep: set[str]) -> None:
        """Remove the namespaces of this home that no replica claims (``keep``: the
        names held), and those of homes deleted since. Blocking: run it in a thread."""

    async def prepare(
        self,
        service: str,
        version: int,
        setup: str | None,
        env: dict[str, str],
        pip: list[str] | str | None = None,
    ) -> Path:
        """Make the version's workdir ready; return it. With ``setup`` or ``pip``
        the version gets its own environment (steadyserve/envs/plan.py), which
        its replicas then run in."""

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        """Place and start the replica at an address the backend chose."""

    def adopt(self, request: AdoptRequest) -> ReplicaHandle | None:
        """Re-attach to a replica a previous controller started, if it still runs
        (by its pid locally, by ``service`` and ``replica_id`` where replicas are
        named, as Ray actors are)."""

    async def stop(self, handle: ReplicaHandle, timeout_s: float) -> None:
        """Ask the replica to exit, and make sure it has after ``timeout_s``."""
