"""A backend whose replicas start instantly: for measuring the controller alone.

Every "replica" is the same tiny HTTP server inside the controller, answering
200 to anything, so readiness probes, routing tables and reconcile ticks are
all real while no process is started. Chosen with ``STEADY_BACKEND=fake``;
never a way to serve users.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from steadyserve.backends.base import LaunchRequest, ReplicaHandle
from steadyserve.paths import Home

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"


class _Always200(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        for _ in range(max(1, data.count(b"\r\n\r\n"))):
            self.transport.write(_ANSWER)


class FakeReplica:
    def __init__(self, port: int) -> None:
        self._port = port
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return None

    @property
    def create_time(self) -> float | None:
        return None

    @property
    def port(self) -> int:
        return self._port

    def exit_code(self) -> int | None:
        return 0 if self._stopped else None

    def stop(self) -> None:
        self._stopped = True


class FakeBackend:
    def __init__(self, home: Home) -> None:
        self.home = home
        self._server: asyncio.Server | None = None
        self._port = 0

    async def _ensure_server(self) -> int:
        if self._server is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(_Always200, "127.0.0.1", 0)
            self._port = int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def prepare(
        self,
        service: str,
        version: int,
        setup: str | None,
        env: dict[str, str],
        pip: list[str] | str | None = None,
    ) -> Path:
        return self.home.version_workdir(service, version)

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        return FakeReplica(await self._ensure_server())

    def adopt(self, pid: int, create_time: float | None, port: int) -> ReplicaHandle | None:
        return None

    async def stop(self, handle: ReplicaHandle, timeout_s: float) -> None:
        if isinstance(handle, FakeReplica):
            handle.stop()
