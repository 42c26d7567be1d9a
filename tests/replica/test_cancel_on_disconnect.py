"""A Python replica's request is cancelled when its caller goes away before the
answer ended (replica/app.py CancelOnDisconnect), with the handle calls it made,
as Ray Serve cancels a request its proxy timed out; after the answer, the
connection's end cancels nothing. Ray's own cases run end to end in
tests/compat/ray_serve/peer/test_request_timeout.py."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import pytest

from steadyserve.replica.app import CancelOnDisconnect
from steadyserve.serve import context

Message = dict[str, Any]


class Caller:
    """The server's side of one request: the body, then a disconnect once let go."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.sent: list[Message] = []
        self._body_given = False

    async def receive(self) -> Message:
        if not self._body_given:
            self._body_given = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.gone.set()  # as uvicorn's receive answers once the response is complete


SCOPE = {"type": "http", "method": "GET", "path": "/", "headers": []}


def test_a_caller_going_away_cancels_the_handler_and_its_handle_calls() -> None:
    seen: list[str] = []
    child: concurrent.futures.Future[Any] = concurrent.futures.Future()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        context.track_call(child)  # as handle.remote() does inside a request
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        caller = Caller()
        serving = asyncio.ensure_future(CancelOnDisconnect(app)(SCOPE, caller.receive, caller.send))
        await asyncio.sleep(0.01)
        caller.gone.set()  # the gateway timed it out and closed the connection
        await asyncio.wait_for(serving, 5)

    asyncio.run(main())
    assert seen == ["cancelled"] and child.cancelled()


def test_the_connections_end_after_the_answer_cancels_nothing() -> None:
    finished: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        await asyncio.sleep(0.05)  # work after the answer (the caller has gone)
        finished.append("done")

    async def main() -> None:
        caller = Caller()
        await asyncio.wait_for(CancelOnDisconnect(app)(SCOPE, caller.receive, caller.send), 5)

    asyncio.run(main())
    assert finished == ["done"]


def test_a_handler_that_reads_the_body_gets_it_and_its_error_propagates() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        raise ValueError(message["type"])

    async def main() -> None:
        caller = Caller()
        await CancelOnDisconnect(app)(SCOPE, caller.receive, caller.send)

    with pytest.raises(ValueError, match=r"http\.request"):
        asyncio.run(main())


def test_a_handler_reading_its_body_late_gets_it_from_the_watcher() -> None:
    """The watcher starts after WATCH_AFTER_S and reads for the handler: the body
    it read reaches the handler, and the caller going away still cancels it."""
    got: list[Message] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(CancelOnDisconnect.WATCH_AFTER_S * 3)
        got.append(await receive())
        await asyncio.sleep(60)

    async def main() -> None:
        caller = Caller()
        serving = asyncio.ensure_future(CancelOnDisconnect(app)(SCOPE, caller.receive, caller.send))
        await asyncio.sleep(CancelOnDisconnect.WATCH_AFTER_S * 4)
        caller.gone.set()
        await asyncio.wait_for(serving, 5)

    asyncio.run(main())
    assert [m["type"] for m in got] == ["http.request"]
