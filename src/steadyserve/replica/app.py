"""The app port: a user's class as an ASGI app, and the ``max_ongoing_requests`` limit.

The load balancer already holds each replica to ``max_ongoing_requests``; the
runner enforces it again (503 at once, never queued) so a replica reached some
other way, or a stale routing table, cannot pile work onto it. A request counts
from its arrival until its last byte is sent, streams included.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steadyserve.replica.responses import to_response
from steadyserve.replica.user import UserClass
from steadyserve.serve import context

log = logging.getLogger("steadyserve.replica")


class OngoingLimit:
    """Count HTTP requests in flight through ``app``; answer 503 beyond ``limit``.

    Lifespan and websocket scopes pass through uncounted."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.ongoing = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.ongoing >= self.limit:
            response = PlainTextResponse(
                f"replica is at max_ongoing_requests ({self.limit})\n", status_code=503
            )
            await response(scope, receive, send)
            return
        self.ongoing += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.ongoing -= 1


class ModelIdHeader:
    """Set ``serve.get_multiplexed_model_id()`` from the request's
    ``serve_multiplexed_model_id`` header for the request's whole run."""

    HEADER = context.MODEL_ID_HEADER.encode()

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        model_id = next(
            (v for k, v in scope.get("headers", []) if k.lower() == self.HEADER), b""
        ).decode("latin-1")
        token = context.set_model_id(model_id)
        try:
            await self.app(scope, receive, send)
        finally:
            context.reset_model_id(token)


class RootPath:
    """Set ``scope["root_path"]`` to the route prefix the gateway matched (its
    ``X-Steady-Root-Path``, first one wins), as Ray Serve's proxy does: FastAPI
    and Starlette route on the path after it, and FastAPI's docs pages link
    under it. Requests to the service's own endpoint carry none."""

    HEADER = b"x-steady-root-path"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            for key, value in scope.get("headers", ()):
                if key == self.HEADER:
                    scope = {**scope, "root_path": scope.get("root_path", "") + value.decode()}
                    break
        await self.app(scope, receive, send)


class ClassApp:
    """ASGI app calling ``user.call(request)`` and converting what it returns.

    An exception before the response started becomes a 500 (an ``HTTPException``
    its own status) with the traceback in the replica's log; after it started,
    the connection is cut so the client sees an incomplete response, not a
    truncated one that looks whole."""

    def __init__(self, user: UserClass) -> None:
        self.user = user

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # websockets: not served by a class
            await send({"type": "websocket.close", "code": 1000})
            return
        if not self.user.has_call:
            message = f"{self.user.name} has no __call__: it is reached through handles only\n"
            await PlainTextResponse(message, status_code=404)(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        response: Response | None = None
        try:
            result = await self.user.call(Request(scope, receive))
            response = await to_response(result, self.user.executor)
            await response(scope, receive, tracked_send)
        except ClientDisconnect:
            return  # the client went away while sending its body; nobody to answer
        except Exception as exc:
            if started:
                raise
            await _error_response(exc, self.user.name)(scope, receive, send)
        finally:
            body = getattr(response, "body_iterator", None)
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()  # closes the user's generator even if the client left


def _error_response(exc: Exception, name: str) -> Response:
    if isinstance(exc, HTTPException):
        detail: Any = exc.detail
        return PlainTextResponse(str(detail), status_code=exc.status_code, headers=exc.headers)
    log.exception("%s.__call__ failed", name)
    return PlainTextResponse("Internal Server Error", status_code=500)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge lifespan events: a class has no startup/shutdown hooks of its own
    (its ``__init__`` ran before the server started)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
