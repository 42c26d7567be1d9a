"""One HTTP/1.1 request to a replica inside its own network namespace.

The controller's HTTP client (aiohttp) connects by address only; a replica with
``service.isolation: network`` is at ``127.0.0.1:PORT`` of its namespace, which
the controller reaches with a socket made there (wire/netns.py).
Readiness probes and ``reconfigure_path`` deliveries send one small request
each, with ``Connection: close``, so this is all they need of a client.
"""

from __future__ import annotations

import asyncio

from steadyserve.wire.netns import connect_in

MAX_BODY = 64 * 1024
"""The most of an answer read (a probe or a reconfigure says little)."""


async def request_in(
    netns: str,
    host: str,
    port: int,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes = b"",
) -> tuple[int, bytes]:
    """(status, the start of the body); OSError or ValueError when no HTTP answer came.
    The caller bounds it in time."""
    sock = await connect_in(netns, host, port)
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        parts = (await reader.readline()).split()
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise ValueError("no HTTP answer")
        while (await reader.readline()).strip():  # the head, bounded by the caller's timeout
            pass
        body_read = b""
        while len(body_read) < MAX_BODY:  # to the end (Connection: close), at most MAX_BODY
            more = await reader.read(MAX_BODY - len(body_read))
            if not more:
                break
            body_read += more
        return int(parts[1]), body_read
    finally:
        writer.close()
