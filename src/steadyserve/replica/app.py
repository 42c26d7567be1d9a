"""The app port: a user's class as an ASGI app, and the ``max_ongoing_requests`` limit.

The load balancer already holds each replica to ``max_ongoing_requests``; the
runner enforces it again (503 at once, never queued) so a replica reached some
other way, or a stale routing table, cannot pile work onto it. A request counts
from its arrival until its last byte is sent, streams included.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
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


class CancelOnDisconnect:
    """Cancel a request's handler, and the handle calls it made, when its caller goes
    away before the answer ended: the gateway closes the connection of a request it
    timed out (Ray's ``request_timeout_s``, 408), the load balancer of one its client
    dropped. Ray Serve cancels such a request the same way: the handler sees
    ``asyncio.CancelledError`` where it awaits (a sync method on a thread runs on).

    A disconnect is only seen by reading the caller's messages, which the handler
    may not do: a watcher reads them for it (``_Watch``), started once the request
    has run ``WATCH_AFTER_S``, so that a request answered sooner costs a timer only
    (a watcher per request cost 36 us of the replica's CPU, measured in-process)."""

    WATCH_AFTER_S = 0.05

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None
        watch = _Watch(receive, task, self.WATCH_AFTER_S)

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                watch.answered = True
            await send(message)

        token = context.collect_calls(watch.calls)
        try:
            await self.app(scope, watch.receive_for_app, tracked_send)
        except asyncio.CancelledError:
            if not watch.cancelled:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+
            if uncancel is not None:
                uncancel()
        finally:
            watch.close()
            context.stop_collecting(token)


class _Watch:
    """One request's watch for its caller going away (see CancelOnDisconnect).

    Until the watcher starts, the handler reads the caller's messages itself; after,
    the watcher reads them and hands them over, at most one body chunk ahead (the
    last chunk does not wait: a handler that never reads its body still has its
    disconnect seen)."""

    def __init__(self, receive: Receive, task: asyncio.Task[Any], after: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.receive, self.task, self.after = receive, task, after
        self.calls: set[concurrent.futures.Future[Any]] = set()
        self.answered = self.cancelled = self.reading = False
        self.inbox: collections.deque[Message] = collections.deque()
        self.waiter: asyncio.Future[Message] | None = None
        self.room: asyncio.Future[None] | None = None
        self.watcher: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = self.loop.call_later(after, self._start)

    async def receive_for_app(self) -> Message:
        if self.watcher is None:
            self.reading = True
            try:
                return await self.receive()
            finally:
                self.reading = False
        if self.inbox:
            message = self.inbox.popleft()
            if self.room is not None and not self.room.done():
                self.room.set_result(None)
            return message
        self.waiter = self.loop.create_future()
        try:
            return await self.waiter
        finally:
            self.waiter = None

    def _start(self) -> None:
        if self.reading:  # the handler reads now: two readers must never overlap
            self.timer = self.loop.call_later(self.after, self._start)
            return
        self.timer = None
        self.watcher = self.loop.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self.receive()
            gone = message["type"] == "http.disconnect"
            if gone and not self.answered:  # after the answer: the connection's end
                self.cancelled = True
                self.task.cancel()
                for call in list(self.calls):
                    call.cancel()
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(message)
            else:
                self.inbox.append(message)
            if gone:
                return
            while message.get("more_body") and self.inbox:
                self.room = self.loop.create_future()
                await self.room

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.watcher is not None:
            self.watcher.cancel()


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
