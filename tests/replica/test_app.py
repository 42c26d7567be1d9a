"""The class → ASGI adapter, in-process: return values, sync/async, errors, limits."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tests.replica._asgi import Reply, call, host


def _sync_gen() -> Iterator[str]:
    yield "a"
    yield "b"


async def _async_gen() -> AsyncIterator[bytes]:
    yield b"x"
    await asyncio.sleep(0)
    yield b"y"


async def _sse() -> AsyncIterator[str]:
    for i in range(2):
        yield f"data: {i}\n\n"


RETURNS: dict[str, Callable[[], Any]] = {
    "str": lambda: "héllo",
    "bytes": lambda: b"\x00\x01",
    "dict": lambda: {"a": 1, "b": [True, None]},
    "list": lambda: [1, "two"],
    "response": lambda: Response("made", status_code=201, media_type="text/x-made"),
    "none": lambda: None,
    "sync_gen": _sync_gen,
    "async_gen": _async_gen,
    "sse": _sse,
    "user_streaming": lambda: StreamingResponse(_sse(), media_type="text/event-stream"),
    "user_streaming_sync": lambda: StreamingResponse(iter(["p", "q"]), media_type="text/plain"),
    "empty_gen": lambda: iter(()),
}


class SyncReturns:
    def __call__(self, request: Request) -> Any:
        assert threading.current_thread() is not threading.main_thread()
        return RETURNS[request.query_params["kind"]]()


class AsyncReturns:
    async def __call__(self, request: Request) -> Any:
        assert threading.current_thread() is threading.main_thread()
        return RETURNS[request.query_params["kind"]]()


def run(cls: type, kind: str) -> Reply:
    async def scenario() -> Reply:
        app, _ = await host(cls)
        return await call(app, query=f"kind={kind}")

    return asyncio.run(scenario())


CLASSES = pytest.mark.parametrize("cls", [SyncReturns, AsyncReturns], ids=["sync", "async"])


@CLASSES
def test_str_is_utf8_text(cls: type) -> None:
    reply = run(cls, "str")
    assert (reply.status, reply.body) == (200, "héllo".encode())
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"


@CLASSES
def test_bytes_are_octet_stream(cls: type) -> None:
    reply = run(cls, "bytes")
    assert (reply.status, reply.body) == (200, b"\x00\x01")
    assert reply.headers["content-type"] == "application/octet-stream"


@CLASSES
@pytest.mark.parametrize("kind", ["dict", "list"])
def test_dicts_and_lists_are_json(cls: type, kind: str) -> None:
    reply = run(cls, kind)
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == RETURNS[kind]()


@CLASSES
def test_a_response_is_sent_as_is(cls: type) -> None:
    reply = run(cls, "response")
    assert (reply.status, reply.body) == (201, b"made")
    assert reply.headers["content-type"].startswith("text/x-made")


@CLASSES
def test_none_is_an_empty_200(cls: type) -> None:
    reply = run(cls, "none")
    assert (reply.status, reply.body) == (200, b"")


@CLASSES
def test_sync_generator_streams_each_chunk(cls: type) -> None:
    reply = run(cls, "sync_gen")
    assert reply.status == 200
    assert reply.chunks == [b"a", b"b"]  # one body message per yielded chunk
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"
    assert "content-length" not in reply.headers


@CLASSES
def test_async_generator_streams_each_chunk(cls: type) -> None:
    reply = run(cls, "async_gen")
    assert reply.chunks == [b"x", b"y"]
    assert reply.headers["content-type"] == "application/octet-stream"


@CLASSES
def test_generator_of_sse_events_is_an_event_stream(cls: type) -> None:
    reply = run(cls, "sse")
    assert reply.chunks == [b"data: 0\n\n", b"data: 1\n\n"]
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["cache-control"] == "no-cache"


@CLASSES
@pytest.mark.parametrize("kind", ["user_streaming", "user_streaming_sync"])
def test_a_users_streaming_response_streams(cls: type, kind: str) -> None:
    reply = run(cls, kind)
    assert reply.status == 200
    assert len(reply.chunks) == 2


@CLASSES
def test_an_empty_generator_is_an_empty_200(cls: type) -> None:
    reply = run(cls, "empty_gen")
    assert (reply.status, reply.body) == (200, b"")


class Echo:
    """A sync ``__call__`` may read the body: the runner read it before the thread ran."""

    def __call__(self, request: Request) -> Any:
        return {"body": asyncio.run(request.json()), "path": request.url.path}


def test_sync_call_gets_the_request_body() -> None:
    async def scenario() -> Reply:
        app, _ = await host(Echo)
        return await call(app, "POST", "/echo", body=json.dumps({"a": 1}).encode())

    reply = asyncio.run(scenario())
    assert reply.json() == {"body": {"a": 1}, "path": "/echo"}


class Failing:
    async def __call__(self, request: Request) -> Any:
        kind = request.query_params["kind"]
        if kind == "http":
            raise HTTPException(404, "no such text")
        if kind == "type":
            return object()
        raise ValueError("boom")


@pytest.mark.parametrize(
    ("kind", "status", "body"),
    [
        ("value", 500, b"Internal Server Error"),
        ("http", 404, b"no such text"),
        ("type", 500, b"Internal Server Error"),
    ],
)
def test_errors_become_error_responses(kind: str, status: int, body: bytes) -> None:
    async def scenario() -> Reply:
        app, _ = await host(Failing)
        return await call(app, query=f"kind={kind}")

    reply = asyncio.run(scenario())
    assert (reply.status, reply.body) == (status, body)


class Blocking:
    """Holds each request until released: in flight for as long as the test wants."""

    release: asyncio.Event

    async def __call__(self, request: Request) -> Any:
        if request.query_params.get("stream"):
            return self._stream()
        await self.release.wait()
        return "done"

    async def _stream(self) -> AsyncIterator[str]:
        yield "first"
        await self.release.wait()
        yield "last"


async def _until(predicate: Callable[[], bool]) -> None:
    for _ in range(1000):  # bounded: a few event-loop turns are enough
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


@pytest.mark.parametrize("query", ["", "stream=1"], ids=["plain", "streaming"])
def test_past_max_ongoing_requests_answers_503(query: str) -> None:
    async def scenario() -> None:
        Blocking.release = asyncio.Event()
        app, _ = await host(Blocking, limit=2)
        first = [asyncio.create_task(call(app, query=query)) for _ in range(2)]
        await _until(lambda: app.ongoing == 2)
        rejected = await call(app)
        assert rejected.status == 503
        assert b"max_ongoing_requests (2)" in rejected.body
        assert app.ongoing == 2
        Blocking.release.set()
        for task in first:
            assert (await task).status == 200
        assert app.ongoing == 0
        assert (await call(app)).status == 200

    asyncio.run(scenario())


def test_lifespan_is_acknowledged() -> None:
    async def scenario() -> list[str]:
        app, _ = await host(SyncReturns)
        inbox = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        sent: list[str] = []

        async def receive() -> Any:
            return next(inbox)

        async def send(message: Any) -> None:
            sent.append(message["type"])

        await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
        return sent

    assert asyncio.run(scenario()) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
