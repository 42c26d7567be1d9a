"""The blue-green preview port: a second listener whose requests only the new
version answers (``service.blue_green.preview_port``).

Its connections are the proxy's ordinary client connections with every request
pinned to the preview version, exactly as if it carried ``X-Steady-Version``:
same parsing, limits, queueing and metrics (WebSocket handshakes included), and a
clear 503 while the new version has no READY replica. A client's own
``X-Steady-Version`` is stripped and ignored here: it cannot steer a preview
request to another version. The route table says when to open and close it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from steadyserve.lb.downstream import ClientConnection
from steadyserve.lb.proxy import Proxy
from steadyserve.lb.request_head import RequestHead

log = logging.getLogger("steadyserve.lb")


class PinnedHead(RequestHead):
    """A request head pinned to ``preview.version`` whatever the client sends."""

    __slots__ = ("_preview",)

    def __init__(self, preview: Preview) -> None:
        self._preview = preview
        super().__init__()

    def begin(self) -> None:
        super().begin()
        self.pin = self._preview.version
        # Never plain: the connection then calls begin for every request, and the
        # pin follows the preview version as it moves.
        self.marked = True

    def pin_header(self, value: bytes) -> None:
        """The client's X-Steady-Version: stripped (never forwarded) and ignored."""


class PinnedConnection(ClientConnection):
    """A client connection whose requests go to ``preview.version`` only."""

    def __init__(self, proxy: Proxy, preview: Preview) -> None:
        super().__init__(proxy, PinnedHead(preview))


class Preview:
    """Opens, moves and closes the preview listener as route tables arrive."""

    def __init__(self, proxy: Proxy, host: str) -> None:
        self._proxy = proxy
        self._host = host
        self.port: int | None = None
        self.version = 0
        self._server: asyncio.AbstractServer | None = None
        self._task: asyncio.Task[None] | None = None

    def apply(self, preview: tuple[int, int] | None) -> None:
        """Follow the table's ``preview`` (None closes the listener)."""
        port = preview[0] if preview else None
        if preview is not None:
            self.version = preview[1]
        if port == self.port:
            return
        self.port = port
        previous, self._task = self._task, None
        self._task = asyncio.get_running_loop().create_task(self._switch(port, previous))

    async def _switch(self, port: int | None, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            with contextlib.suppress(Exception):
                await previous
        await self._close()
        if port is None:
            return
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: PinnedConnection(self._proxy, self),
                self._host,
                port,
                reuse_address=True,
            )
            log.info("blue-green preview of version %d on port %d", self.version, port)
        except OSError as exc:
            log.warning("cannot listen on preview port %d: %s", port, exc)

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)

    async def stop(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        await self._close()
