"""A replica that echoes WebSocket messages, prefixed with its version and replica id.

``GET /health`` answers 200 (the readiness probe); any other path upgrades to a
WebSocket whose every text message comes back as ``"VERSION REPLICA message"``.
SIGTERM closes open sockets with 1001, as websockets' server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from http import HTTPStatus

from websockets.asyncio.server import Request, Response, ServerConnection, serve

VERSION = os.environ.get("STEADY_SERVICE_VERSION", "?")
REPLICA = os.environ.get("STEADY_REPLICA_ID", "?")


def health(connection: ServerConnection, request: Request) -> Response | None:
    if request.path == "/health":
        return connection.respond(HTTPStatus.OK, "ok\n")
    return None


async def echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(f"{VERSION} {REPLICA} {message}")


async def main() -> None:
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.cancel)
    port = int(os.environ["PORT"])
    async with serve(echo, "127.0.0.1", port, process_request=health, compression=None):
        print(f"ws echo replica {REPLICA} (version {VERSION}) on 127.0.0.1:{port}", flush=True)
        with contextlib.suppress(asyncio.CancelledError):
            await stop


asyncio.run(main())
