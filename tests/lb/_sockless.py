"""The load balancer's real connection objects driven without sockets: transports
that record what is written, one pooled replica connection, no network."""

from __future__ import annotations

import asyncio
from typing import Any

from steadyserve.lb.balancer import Balancer
from steadyserve.lb.downstream import ClientConnection
from steadyserve.lb.exchange import Exchange
from steadyserve.lb.proxy import Proxy
from steadyserve.lb.upstream import UpstreamConnection
from steadyserve.wire.routes import RouteTable

PEER = "10.0.0.7"


class RecordingTransport:
    """Just enough of a transport: keeps every write."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def writelines(self, data: list[bytes]) -> None:
        self.out.append(b"".join(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (PEER, 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def bytes(self) -> bytes:
        return b"".join(self.out)


class Rig:
    """A Proxy with one pooled replica connection and one client connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, **proxy_kw: Any) -> None:
        async def make() -> Proxy:
            table = RouteTable.static("127.0.0.1:9", "least_load", 100, -1)
            return Proxy("t", Balancer(table, "least_load", 100, -1), **proxy_kw)

        self.proxy = proxy = loop.run_until_complete(make())
        self.records: list[Exchange] = []
        proxy.metrics.record = lambda ex, client: self.records.append(ex)  # type: ignore[method-assign]
        replica = proxy.balancer.replicas[0]
        self.upstream_transport = RecordingTransport()
        self.upstream = UpstreamConnection(proxy, replica)
        self.upstream.connection_made(self.upstream_transport)  # type: ignore[arg-type]
        self.upstream.in_pool = True
        self.upstream.idle_since = proxy.now()  # pooled from now (lb/pool.py)
        replica.idle.append(self.upstream)
        self.client_transport = RecordingTransport()
        self.client = ClientConnection(proxy)
        self.client.connection_made(self.client_transport)  # type: ignore[arg-type]

    def close(self) -> None:
        self.client.connection_lost(None)
