"""A minimal keep-alive HTTP server answering "hello": the fastest replica we can write.

Benchmarks proxy to it so that what they measure is the load balancer, not the
replica: asyncio.Protocol on uvloop, httptools parsing, one write per response.
``--server aiohttp`` instead serves the same answer from an aiohttp web app, the
speed of a typical Python framework replica.

    python bench/hello_replica.py --port 8001 [--loop asyncio] [--server aiohttp]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import cast

import httptools
import uvloop

BODY = b"hello"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s"
    % (len(BODY), BODY)
)
RESPONSE_CLOSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s" % (len(BODY), BODY)
)


class Hello(asyncio.Protocol):
    """Answers every request with "hello"; honours Connection: close and HTTP/1.0."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.out: list[bytes] = []

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

    def on_message_complete(self) -> None:
        self.out.append(RESPONSE if self.parser.should_keep_alive() else RESPONSE_CLOSE)


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
