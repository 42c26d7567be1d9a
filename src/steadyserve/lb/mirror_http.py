"""Reading whole HTTP answers for a shadow comparison: the stable answer from the bytes
the upstream connection saw, the new version's from a connection of its own.

Only mirrored requests come here, off the client's path: the client's answer was
written before any of this runs (lb/mirror.py). An answer is read into memory up
to ``MAX_ANSWER_BYTES`` of body; a longer one is kept as incomplete (its status and
headers are compared, its body is not).
"""

from __future__ import annotations

import asyncio
import contextlib

import httptools

from steadyserve.core.shadow.compare import Answer
from steadyserve.wire.netns import create_connection

MAX_ANSWER_BYTES = 64 * 1024
MAX_HEADERS = 100


class AnswerReader:
    """An httptools response parser that keeps one final (non-1xx) answer."""

    def __init__(self, head_only: bool = False) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.head_only = head_only  # a HEAD request's answer has no body to wait for
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.size = 0
        self.status = 0
        self.headers_done = False
        self.done = False
        self.complete = True

    def feed(self, data: bytes) -> None:
        """Parse ``data``; HttpParserError for what is not HTTP."""
        if not self.done:
            self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self.headers) < MAX_HEADERS:
            key = name.decode("latin-1").lower()
            self.headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status >= 200:
            self.headers_done = True
            if self.head_only:
                self.done = True
        else:
            self.headers = {}  # an interim 1xx answer: the final one follows

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > MAX_ANSWER_BYTES:
            self.complete = False
            self.body = []
        elif self.complete:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if self.headers_done:
            self.done = True

    def answer(self) -> Answer | None:
        """The answer read, or None if its head never came."""
        if not self.headers_done:
            return None
        return Answer(self.status, self.headers, b"".join(self.body), self.complete)


def parse_seen(seen: list[bytes], head_only: bool) -> Answer | None:
    """The stable answer from the raw bytes its upstream connection read."""
    reader = AnswerReader(head_only)
    try:
        reader.feed(b"".join(seen))
    except httptools.HttpParserError:
        return None
    return reader.answer() if reader.done else None


class _Fetch(asyncio.Protocol):
    def __init__(self, reader: AnswerReader, done: asyncio.Future[None]) -> None:
        self.reader = reader
        self.done = done

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data)
        except httptools.HttpParserError as exc:
            if not self.done.done():
                self.done.set_exception(exc)
            return
        if self.reader.done and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        # An answer framed by the connection's end is complete here.
        if not self.done.done():
            self.done.set_result(None)


async def fetch(
    host: str, port: int, netns: str | None, request: bytes, head_only: bool, timeout: float
) -> Answer | None:
    """Send ``request`` (head and body, as the stable replica got it) on a new
    connection and read the answer; None when there was none (refused, reset, not
    HTTP, or not within ``timeout``)."""
    loop = asyncio.get_running_loop()
    reader = AnswerReader(head_only)
    done: asyncio.Future[None] = loop.create_future()
    opened: list[asyncio.BaseTransport] = []

    async def exchange() -> None:
        transport, _ = await create_connection(
            loop, lambda: _Fetch(reader, done), host, port, netns
        )
        opened.append(transport)
        transport.write(request)  # type: ignore[attr-defined]
        await done

    try:
        await asyncio.wait_for(exchange(), timeout)
    except (OSError, asyncio.TimeoutError, httptools.HttpParserError):
        return None
    finally:
        for transport in opened:
            with contextlib.suppress(Exception):
                transport.close()
    return reader.answer()
