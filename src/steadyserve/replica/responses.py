"""Turn what ``__call__`` returned into an HTTP response, as Ray Serve does.

``str`` → text/plain; ``bytes`` → application/octet-stream; dict, list (and
other JSON scalars) → JSON; a Starlette ``Response`` → as is; ``None`` → an
empty 200; a sync or async generator (any iterator) → a chunked stream, each
chunk sent as soon as it is yielded.

A bare generator's content type is read from its first chunk, which is pulled
before the headers go out: a first chunk starting with ``data:``, ``event:``,
``id:``, ``retry:`` or ``:`` makes it ``text/event-stream`` (SSE); otherwise str
chunks give text/plain and bytes chunks application/octet-stream. Wrap the
generator in a ``StreamingResponse`` to choose the type yourself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from concurrent.futures import Executor, Future, wait
from typing import Any

from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

Chunk = bytes | memoryview
Chunks = AsyncGenerator[tuple[Chunk, bool], None]  # each chunk, and whether it was str
_SSE_PREFIXES = (b"data:", b"event:", b"id:", b"retry:", b":")
_DONE = object()


class ReturnTypeError(TypeError):
    """``__call__`` returned something with no HTTP meaning."""


async def to_response(value: Any, executor: Executor) -> Response:
    if isinstance(value, Response):
        return value
    if value is None:
        return Response(status_code=200)
    if isinstance(value, str):
        return PlainTextResponse(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Response(bytes(value), media_type="application/octet-stream")
    if isinstance(value, (dict, list, tuple, int, float)):  # bool is an int
        return JSONResponse(value)
    if isinstance(value, AsyncIterator):
        return await _stream(_from_async(value))
    if isinstance(value, Iterator):
        return await _stream(_from_sync(value, executor))
    raise ReturnTypeError(
        f"__call__ returned {type(value).__name__}; return str, bytes, dict, list, "
        f"a Response, None or a generator"
    )


async def _stream(chunks: Chunks) -> Response:
    first = await anext(chunks, None)
    if first is None:
        return Response(status_code=200, media_type="text/plain")
    body, was_text = first
    if bytes(body[:6]).startswith(_SSE_PREFIXES):
        media_type = "text/event-stream"
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    else:
        media_type = "text/plain; charset=utf-8" if was_text else "application/octet-stream"
        headers = {}
    return StreamingResponse(_prepend(body, chunks), media_type=media_type, headers=headers)


async def _prepend(first: Chunk, rest: Chunks) -> AsyncIterator[Chunk]:
    """The stream as sent; closing it (client gone, error) closes the user's generator."""
    try:
        yield first
        async for body, _ in rest:
            yield body
    finally:
        with contextlib.suppress(Exception):
            await rest.aclose()


def _encode(chunk: object) -> tuple[Chunk, bool]:
    if isinstance(chunk, str):
        return chunk.encode("utf-8"), True
    if isinstance(chunk, (bytes, memoryview)):
        return chunk, False
    if isinstance(chunk, bytearray):
        return bytes(chunk), False
    raise ReturnTypeError(f"a streamed chunk must be str or bytes, not {type(chunk).__name__}")


async def _from_async(source: AsyncIterator[Any]) -> Chunks:
    try:
        async for chunk in source:
            yield _encode(chunk)
    finally:
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


async def _from_sync(source: Iterator[Any], executor: Executor) -> Chunks:
    """Each ``next()`` in the thread pool: a sync generator may block between chunks.

    When the stream ends early (client gone, error), the generator is closed in
    the pool right after its current ``next()`` returns, so its ``finally`` runs
    then rather than at garbage collection.
    """
    pending: Future[Any] | None = None
    exhausted = False
    try:
        while True:
            pending = executor.submit(next, source, _DONE)
            chunk = await asyncio.wrap_future(pending)
            pending = None
            if chunk is _DONE:
                exhausted = True
                return
            yield _encode(chunk)
    finally:
        close = getattr(source, "close", None)
        if close is not None and not exhausted:
            # RuntimeError: the pool is shut down (the replica exits); nothing to run it.
            with contextlib.suppress(RuntimeError):
                executor.submit(_close_after, pending, close)


def _close_after(pending: Future[Any] | None, close: Any) -> None:
    """In a pool thread: wait for the generator's running ``next()``, then close it."""
    if pending is not None:
        wait([pending])
    with contextlib.suppress(Exception):
        close()
