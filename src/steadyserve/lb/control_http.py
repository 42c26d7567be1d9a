"""A tiny HTTP/1.1 client for the load balancer's talk with the controller.

Only the control plane uses it (a long-poll every few seconds, a load report every
half second), so it favours a small footprint over features: one request per
connection, plain ``http://`` only, the whole body in memory. Importing a full
client library would cost the load balancer more memory than its data path.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httptools

from steadyserve.home import api_token
from steadyserve.home.paths import Home


class ControlHTTPError(Exception):
    """The controller could not be reached or sent an unreadable answer."""


class _Collector:
    """httptools callbacks gathering one response."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.done = False

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


async def _exchange(host: str, port: int, request: bytes, max_bytes: int) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        collector = _Collector()
        parser = httptools.HttpResponseParser(collector)
        received = 0
        while not collector.done:
            data = await reader.read(65536)
            if not data:
                raise ControlHTTPError("connection closed before the response ended")
            received += len(data)
            if received > max_bytes:
                raise ControlHTTPError("response too large")
            parser.feed_data(data)
        return parser.get_status_code(), b"".join(collector.body)
    finally:
        writer.close()


async def request(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    timeout: float = 5.0,
    max_bytes: int = 16 * 1024 * 1024,
    *,
    home: Home,
) -> tuple[int, bytes]:
    """Send one request to ``url``, the controller of ``home``, with the token it
    requires (home/api_token.py); return (status, body). Raises ControlHTTPError."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ControlHTTPError(f"unsupported controller url {url!r}")
    port = parts.port or 80
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    host_header = parts.netloc
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}", "Connection: close"]
    lines.extend(f"{name}: {value}" for name, value in api_token.header(home.root).items())
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
    try:
        return await asyncio.wait_for(_exchange(parts.hostname, port, raw, max_bytes), timeout)
    except ControlHTTPError:
        raise
    except (OSError, asyncio.TimeoutError, httptools.HttpParserError) as exc:
        raise ControlHTTPError(f"{method} {url}: {exc!r}") from exc
