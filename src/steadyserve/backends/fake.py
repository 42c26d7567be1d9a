"""A backend whose replicas start instantly: for measuring and testing the controller alone.

Every "replica" is a record in this object. With ``serve=True`` (``STEADY_BACKEND=fake``,
the benchmarks) each answers 200 to anything through one tiny HTTP server inside
the controller, so readiness probes, routing tables and reconcile ticks are all
real while no process is started. With ``serve=False`` (the controller's unit
tests) nothing listens at all: the tests answer the probes themselves, end a
replica with :meth:`FakeReplica.exit`, and hand the same backend to a second
runtime to play a controller restart (its replicas "survive", so they can be
re-adopted). Never a way to serve users.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import cast

from steadyserve.backends import netns
from steadyserve.backends.base import AdoptRequest, LaunchRequest, ProvisionError, ReplicaHandle
from steadyserve.home.paths import Home

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"
# Far above any real pid, so a fake replica's number never names a real process.
_FIRST_PID = 10_000_000
_FIRST_PORT = 20_000


class _Always200(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        for _ in range(max(1, data.count(b"\r\n\r\n"))):
            self.transport.write(_ANSWER)


class FakeReplica:
    """A replica of the simulated-time tests: no process, an exit code set by hand."""

    preempted = False  # set by a test that loses the replica's "node"

    def __init__(
        self, pid: int, port: int, control_port: int | None, request: LaunchRequest
    ) -> None:
        self._pid = pid
        self._port = port
        self._control_port = control_port
        self.request = request
        self._exit: int | None = None

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def create_time(self) -> float | None:
        return None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return self._port

    @property
    def control_port(self) -> int | None:
        return self._control_port

    def exit_code(self) -> int | None:
        return self._exit

    def exit(self, code: int) -> None:
        """The replica's process ends (a crash, in a test)."""
        if self._exit is None:
            self._exit = code


class FakeBackend:
    places = True

    def isolation_unavailable(self) -> str | None:
        return netns.unavailable()  # it stands for the local backend on this machine

    def reap_isolation(self, keep: set[str]) -> None:
        netns.reap(self.home.root, keep)
        netns.reap_deleted_homes(self.home.root)

    def __init__(self, home: Home, *, serve: bool = True) -> None:
        self.home = home
        self.serve = serve
        self._server: asyncio.Server | None = None
        self._server_port = 0
        self._pids = itertools.count(_FIRST_PID)
        self._ports = itertools.count(_FIRST_PORT)
        self.replicas: dict[int, FakeReplica] = {}
        """Every replica launched, by pid (what "processes" exist)."""
        self.prepare_error: str | None = None
        """Set by a test: every prepare fails with this ProvisionError."""
        self.stopped: list[int] = []

    async def _ensure_server(self) -> int:
        if self._server is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(_Always200, "127.0.0.1", 0)
            self._server_port = int(self._server.sockets[0].getsockname()[1])
        return self._server_port

    async def prepare(
        self,
        service: str,
        version: int,
        setup: str | None,
        env: dict[str, str],
        pip: list[str] | str | None = None,
    ) -> Path:
        if self.prepare_error is not None:
            raise ProvisionError(self.prepare_error)
        return self.home.version_workdir(service, version)

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        port = await self._ensure_server() if self.serve else next(self._ports)
        control_port = next(self._ports) if request.control_port and not self.serve else None
        replica = FakeReplica(next(self._pids), port, control_port, request)
        self.replicas[replica._pid] = replica
        return replica

    def adopt(self, request: AdoptRequest) -> ReplicaHandle | None:
        replica = self.replicas.get(request.pid)
        return replica if replica is not None and replica.exit_code() is None else None

    async def stop(self, handle: ReplicaHandle, timeout_s: float) -> None:
        if isinstance(handle, FakeReplica):
            handle.exit(0)
            self.stopped.append(handle._pid)
