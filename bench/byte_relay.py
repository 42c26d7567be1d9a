"""The floor of any proxy whose per-request path runs Python on uvloop.

Not a load balancer: each client connection gets its own connection to one
upstream, opened once, and bytes are copied both ways as they arrive. No HTTP
parsing, no routing, no pooling, no counters: per request exactly the two
``data_received`` callbacks and two ``transport.write`` calls that any design
keeping Python in the loop must make (a C helper called from Python included).

``bench/lb_overhead.py --proxies nginx,haproxy,floor`` runs it beside nginx and
HAProxy: if even this cannot match nginx on the machine, no small native helper
under a Python event loop can, and matching needs the whole per-request path
(its event loop included) out of the interpreter.

    python bench/byte_relay.py --port 8081 --upstream 8080
    python bench/byte_relay.py --args FILE   # FILE holds "PORT UPSTREAM" (benchlib)
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path

import uvloop


class Side(asyncio.Protocol):
    """One end of a client <-> upstream pair; writes what it reads to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.pending: list[bytes] = []  # bytes read before the peer was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()


class Client(Side):
    """A client connection: opens its upstream connection when it arrives."""

    upstream_port = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(Side, "127.0.0.1", self.upstream_port)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        upstream.peer, self.peer = self, upstream
        if upstream.transport is not None:
            upstream.transport.writelines(self.pending)
        self.pending = []


async def serve(port: int, upstream: int) -> None:
    Client.upstream_port = upstream
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Client, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--port", type=int, help="listen on 127.0.0.1:PORT")
    p.add_argument("--upstream", type=int, help="relay to 127.0.0.1:UPSTREAM")
    p.add_argument("--args", type=Path, help='a file holding "PORT UPSTREAM"')
    args = p.parse_args()
    if args.args is not None:
        args.port, args.upstream = (int(x) for x in args.args.read_text().split())
    if args.port is None or args.upstream is None:
        p.error("give --port and --upstream, or --args")
    uvloop.run(serve(args.port, args.upstream))


if __name__ == "__main__":
    main()
