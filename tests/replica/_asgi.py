"""Drive an ASGI app in-process: one request in, every message out, no sockets."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message

from steadyserve.replica.app import ClassApp, OngoingLimit
from steadyserve.replica.user import UserClass


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    chunks: list[bytes] = field(default_factory=list)  # one per http.response.body message

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def json(self) -> Any:
        return json.loads(self.body)


async def call(
    app: ASGIApp,
    method: str = "GET",
    path: str = "/",
    query: str = "",
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> Reply:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"host", b"test"),
            (b"content-length", str(len(body)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    body_sent = False
    finished = asyncio.Event()
    messages: list[Message] = []

    async def receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        messages.append(message)

    try:
        await app(scope, receive, send)
    finally:
        finished.set()
    start = messages[0]
    assert start["type"] == "http.response.start", messages
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    reply = Reply(start["status"], headers)
    for message in messages[1:]:
        assert message["type"] == "http.response.body"
        if message.get("body"):
            reply.chunks.append(bytes(message["body"]))
    assert not messages[-1].get("more_body", False), "response not completed"
    return reply


async def host(cls: type, limit: int = 100, threads: int = 4) -> tuple[OngoingLimit, UserClass]:
    """Build ``cls`` as the runner does and return its app port's ASGI app."""
    user = UserClass(cls, ThreadPoolExecutor(threads))
    await user.construct()
    return OngoingLimit(ClassApp(user), limit), user
