"""The callee's side of handle calls: ``POST /-/steady/call`` on the app port.

It sits inside ``OngoingLimit``, so a handle call counts against
``max_ongoing_requests`` like any request, and in front of the user's app, so
the user's routes never see it. Load balancers refuse the path (the controller
lists it in ``blocked_paths``), and the app port is a loopback port any local
user can connect to, so every call must carry this home's graph secret
(``X-Steady-Graph-Secret``; every Python replica and driver of the home has it,
no other user can derive it): without it the call is refused 403 before its body
is read. A call names a method the deployment exposes to handles: never a private
one, nor a lifecycle hook the controller drives (``reconfigure``,
``check_health``, ``record_routing_stats``).

The method runs the way the user wrote it (async on the loop, sync in the
request pool, generators streamed frame by frame); its exception becomes an
error frame the caller raises. ``steadyserve.serve.wire`` has the format.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import hmac
import inspect
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from steadyserve.replica.user import UserClass, runs_on_loop
from steadyserve.serve import wire

log = logging.getLogger("steadyserve.replica")

MAX_CALL_BODY = 256 * 1024 * 1024
LIFECYCLE_METHODS = frozenset({"reconfigure", "check_health", "record_routing_stats"})
"""Called by the controller and the runner, never by a handle (Ray's hooks)."""
_DONE = object()


class CallApp:
    """Serve ``wire.CALL_PATH``; pass everything else to ``app``."""

    def __init__(self, app: ASGIApp, user: UserClass | None, graph_secret: str | None) -> None:
        self.app = app
        self.user = user
        self.secret = graph_secret.encode() if graph_secret else None
        self.path = wire.CALL_PATH

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        trusted = self._trusted(headers.get(wire.GRAPH_SECRET_HEADER.lower(), b""))
        try:
            if not trusted:
                raise _Refused(403, "a handle call needs this home's graph secret")
            if scope["method"] != "POST":
                raise _Refused(405, "handle calls are POSTs")
            if self.user is None or self.user.instance is None:
                raise _Refused(404, "an ASGI app has no methods to call through a handle")
            name = headers.get(wire.METHOD_HEADER.lower(), b"__call__").decode("latin-1")
            stream = headers.get(wire.STREAM_HEADER.lower(), b"0") == b"1"
            method = self._method(name)
            body = await _read_body(receive)
            payload = wire.decode_one(body, allow_pickle=trusted)
            if not isinstance(payload, dict):
                raise _Refused(400, "the call body must be {args, kwargs}")
            args, kwargs = payload.get("args", []), payload.get("kwargs", {})
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise _Refused(400, "args must be a list and kwargs an object")
        except _Refused as exc:
            await _answer(send, exc.status, wire.error_frame(exc))
            return
        except wire.WireError as exc:
            await _answer(send, 400, wire.error_frame(exc))
            return
        await self._run(send, receive, name, method, args, kwargs, stream, trusted)

    def _trusted(self, given: bytes) -> bool:
        return self.secret is not None and hmac.compare_digest(given, self.secret)

    def _method(self, name: str) -> Any:
        assert self.user is not None
        if name != "__call__" and (name.startswith("_") or not name.isidentifier()):
            raise _Refused(404, f"{name!r} is not a public method of {self.user.name}")
        if name in LIFECYCLE_METHODS:
            raise _Refused(404, f"{name!r} is {self.user.name}'s lifecycle hook, not a handle's")
        method = getattr(self.user.instance, name, None)
        if method is None or not callable(method):
            raise _Refused(404, f"{self.user.name} has no method {name!r}")
        return method

    async def _run(
        self,
        send: Send,
        receive: Receive,
        name: str,
        method: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        stream: bool,
        trusted: bool,
    ) -> None:
        assert self.user is not None
        loop = asyncio.get_running_loop()
        try:
            if runs_on_loop(method):
                result = method(*args, **kwargs)
            else:
                run = contextvars.copy_context().run  # the model id goes with the call
                result = await loop.run_in_executor(
                    self.user.executor, lambda: run(method, *args, **kwargs)
                )
            if inspect.isawaitable(result):
                result = await result
            streams = isinstance(result, (AsyncIterator, Iterator)) and not isinstance(
                result, (str, bytes, dict, list)
            )
            if streams != stream:
                want = "handle.options(stream=True)" if streams else "a handle without stream=True"
                raise TypeError(f"{self.user.name}.{name} must be called with {want}")
            if not streams:
                await _answer(send, 200, wire.encode(result, allow_pickle=trusted))
                return
        except Exception as exc:
            log.exception("%s.%s failed (handle call)", self.user.name, name)
            await _answer(send, 500, wire.error_frame(exc))
            return
        await self._stream(send, receive, result, trusted)

    async def _stream(self, send: Send, receive: Receive, result: Any, trusted: bool) -> None:
        """Send each item as a frame; if the caller goes away (the handle's stream
        was cancelled), stop and close the user's generator at once."""
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", wire.CONTENT_TYPE.encode())],
            }
        )
        pump = asyncio.ensure_future(self._pump(send, result, trusted))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not pump.done():
                pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump

    async def _pump(self, send: Send, result: Any, trusted: bool) -> None:
        items = self._items(result)
        try:
            async for item in items:
                chunk = wire.encode(item, allow_pickle=trusted)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                # Let the loop run between items: a generator that never awaits would
                # otherwise hold it, and a gone caller would never be noticed.
                await asyncio.sleep(0)
        except Exception as exc:  # after the head: an error frame ends the stream
            log.exception("%s stream failed (handle call)", self.user.name if self.user else "")
            chunk = wire.error_frame(exc)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await items.aclose()  # runs the user's generator's finally now
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _items(self, result: Any) -> AsyncGenerator[Any, None]:
        if isinstance(result, AsyncIterator):
            try:
                async for item in result:
                    yield item
            finally:
                aclose = getattr(result, "aclose", None)
                if aclose is not None:
                    await aclose()
            return
        assert self.user is not None
        executor = self.user.executor
        pending: concurrent.futures.Future[Any] | None = None
        ctx = contextvars.copy_context()

        def step() -> Any:
            return ctx.run(next, result, _DONE)

        try:
            while True:
                pending = executor.submit(step)
                item = await asyncio.wrap_future(pending)
                pending = None
                if item is _DONE:
                    return
                yield item
        finally:
            # The running next() cannot be interrupted: close right after it returns.
            close = getattr(result, "close", None)
            if close is not None:
                with contextlib.suppress(RuntimeError):  # the pool is shut down
                    executor.submit(_close_after, pending, close)


def _close_after(pending: concurrent.futures.Future[Any] | None, close: Any) -> None:
    if pending is not None:
        concurrent.futures.wait([pending])
    with contextlib.suppress(Exception):
        close()


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _disconnected(receive: Receive) -> None:
    """Return once the caller has closed the connection."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refused(400, "the caller went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_CALL_BODY:
            raise _Refused(413, "call body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", wire.CONTENT_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
