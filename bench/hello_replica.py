"""A minimal keep-alive HTTP server answering "hello": the fastest replica we can write.

Benchmarks proxy to it so that what they measure is the load balancer, not the
replica: asyncio.Protocol on uvloop, httptools parsing, one write per response.
``--loop asyncio`` runs the same protocol on the default asyncio event loop (a
minimal asyncio hello replica); ``--server aiohttp`` serves the same answer from
an aiohttp web app, the speed of a typical Python framework replica.

``GET /sse?n=N&interval=S`` (protocol server) answers a chunked
``text/event-stream`` of N events, S seconds apart; each event carries the
replica's CLOCK_MONOTONIC in nanoseconds when it was written
(``data: <i> <ns>``), so a client on the same machine can tell how long each
chunk took to reach it.

    python bench/hello_replica.py --port 8001 [--loop asyncio] [--server aiohttp]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from typing import cast
from urllib.parse import parse_qs, urlsplit

import httptools
import uvloop

BODY = b"hello"
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)
RESPONSE_CLOSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s" % (len(BODY), BODY)
)
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


class Hello(asyncio.Protocol):
    """Answers every request with "hello"; honours Connection: close and HTTP/1.0."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.out: list[bytes] = []
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()
            return
        out = self.out
        if out:
            self.transport.write(b"".join(out))
            if out[-1] is RESPONSE_CLOSE:
                self.transport.close()
            out.clear()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_message_complete(self) -> None:
        url, self.url = self.url, b""
        if url.startswith(b"/sse"):
            asyncio.get_running_loop().create_task(self.stream(url.decode()))
            return
        self.out.append(RESPONSE if self.parser.should_keep_alive() else RESPONSE_CLOSE)

    async def stream(self, url: str) -> None:
        """Send n events, ``interval`` seconds apart, each stamped with the monotonic clock."""
        assert self.transport is not None
        query = parse_qs(urlsplit(url).query)
        count = int(query.get("n", ["10"])[0])
        interval = float(query.get("interval", ["0.01"])[0])
        keep_alive = self.parser.should_keep_alive()
        self.transport.write(SSE_HEAD)
        for i in range(count):
            if i and interval > 0:
                await asyncio.sleep(interval)
            if self.transport.is_closing():
                return
            event = b"data: %d %d\n\n" % (i, time.monotonic_ns())
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.transport.write(b"0\r\n\r\n")
        if not keep_alive:
            self.transport.close()


async def serve(host: str, port: int, kind: str = "protocol") -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if kind == "aiohttp":
        from aiohttp import web

        async def hello(request: web.Request) -> web.Response:
            return web.Response(body=BODY, content_type="text/plain")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, backlog=4096).start()
        print(f"hello replica (aiohttp) listening on http://{host}:{port}", flush=True)
        await stop.wait()
        await runner.cleanup()
        return
    server = await loop.create_server(Hello, host, port, reuse_address=True, backlog=4096)
    print(f"hello replica listening on http://{host}:{port}", flush=True)
    await stop.wait()
    server.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--loop", default="uvloop", choices=("uvloop", "asyncio"))
    p.add_argument("--server", default="protocol", choices=("protocol", "aiohttp"))
    args = p.parse_args()
    if args.loop == "uvloop":
        uvloop.run(serve(args.host, args.port, args.server))
    else:
        asyncio.run(serve(args.host, args.port, args.server))


if __name__ == "__main__":
    main()
