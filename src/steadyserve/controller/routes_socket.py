"""The controller's routes-only endpoint on a Unix socket under the home.

A Python replica in its own network namespace (``service.isolation: network``)
cannot reach the controller's TCP port: the host's loopback is out of reach.
Its handles still need the callees' route tables (and to wake a callee at zero),
so the controller also serves exactly those two calls on
``<home>/sockets/routes.sock`` (0600 in a 0700 directory: only the home's owner
connects), with the routes-only token. Nothing else of the API is there:
``GET /api/v1/services`` answers 404 (docs/isolation.md, docs/security.md).
"""

from __future__ import annotations

import hmac
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from steadyserve.controller.api import Handler, add_route_calls, errors_as_json
from steadyserve.home import unix_socket
from steadyserve.wire import replica_contract as contract

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller

log = logging.getLogger("steadyserve.controller")


def routes_only_app(controller: Controller) -> web.Application:
    """The route-table long-poll and wake, behind the routes-only token; nothing else."""
    expected = f"Bearer {contract.routes_token(controller.home.root)}".encode()

    @web.middleware
    async def routes_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return web.json_response(
                {"error": "missing or wrong token (docs/security.md)", "kind": "unauthorized"},
                status=401,
            )
        return await handler(request)

    app = web.Application(middlewares=[routes_token, errors_as_json], client_max_size=64 * 1024)
    routes = web.RouteTableDef()
    add_route_calls(routes, controller)
    app.add_routes(routes)
    return app


async def start(controller: Controller) -> web.AppRunner | None:
    """Listen on the home's routes socket; None (logged) where it cannot be made,
    e.g. a home whose path is too long for a Unix socket: isolated replicas' handles
    then find no route table, and say so."""
    path = controller.home.routes_socket
    try:
        sock = unix_socket.bind_private(path)
    except OSError as exc:
        log.warning("no routes socket for isolated replicas: %s", exc)
        return None
    runner = web.AppRunner(
        routes_only_app(controller), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


async def stop(controller: Controller, runner: web.AppRunner | None) -> None:
    if runner is not None:
        await runner.cleanup()
        unix_socket.remove(controller.home.routes_socket)
