"""Every request gets exactly one count (and access-log line), with the outcome of
how it ended, whatever happens to it: searched for a counter-example with
hypothesis over sequences of endings, through the real connection, proxy and
metrics objects (transports that only keep what is written, as
bench/lb_python_cost.py drives them)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.lb.balancer import Balancer
from steadyserve.lb.downstream import ClientConnection
from steadyserve.lb.metrics import LBMetrics
from steadyserve.lb.proxy import Exchange, Proxy
from steadyserve.lb.upstream import UpstreamConnection
from steadyserve.wire.routes import RouteTable

REQUEST = b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
CHUNK = b"d\r\ndata: token\n\n\r\n"
END = b"0\r\n\r\n"

# How a request ends, and the outcome it must be counted with.
ENDINGS = {
    "whole": "completed",
    "client_leaves_waiting": "client_aborted",  # before any of the response
    "client_leaves_mid": "client_aborted",  # after the head and a chunk
    "replica_breaks_mid": "replica_failed",
    "replica_leaves_table_then_breaks": "cut_by_drain",
}


class Transport:
    def __init__(self) -> None:
        self.closed = False

    def write(self, data: bytes) -> None:
        pass

    def writelines(self, data: list[bytes]) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Recorded(LBMetrics):
    """The real metrics, and a list of each exchange they counted."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Exchange, str]] = []

    def record(self, ex: Exchange, client: ClientConnection) -> None:
        self.seen.append((ex, ex.outcome))
        super().record(ex, client)


class Bench:
    """One proxy with one replica; fresh client and replica connections as needed."""

    def __init__(self) -> None:
        self.table = RouteTable.static("127.0.0.1:9", "least_load", 100, -1)
        self.proxy = Proxy("svc", Balancer(self.table, "least_load", 100, -1))
        self.metrics = self.proxy.metrics = Recorded()
        self.replica = self.proxy.balancer.replicas[0]
        self.client = self._client()

    def _client(self) -> tuple[ClientConnection, Transport]:
        conn = ClientConnection(self.proxy)
        transport = Transport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        return conn, transport

    def upstream(self) -> UpstreamConnection:
        """A pooled replica connection for the next request (a new one if it broke)."""
        for conn in self.replica.idle:
            if not conn.closed:
                return conn
        conn = UpstreamConnection(self.proxy, self.replica)
        conn.connection_made(Transport())  # type: ignore[arg-type]
        conn.in_pool = True
        conn.idle_since = self.proxy.now()  # pooled just now: within its hold (lb/pool.py)
        self.replica.idle.append(conn)
        return conn

    def closed(self, client: ClientConnection, transport: Transport) -> None:
        """What asyncio does after a transport.close(): the protocol hears of it."""
        if transport.closed:
            client.connection_lost(None)
            self.client = self._client()

    def run(self, ending: str) -> None:
        client, transport = self.client
        upstream = self.upstream()
        client.data_received(REQUEST)
        if ending == "client_leaves_waiting":
            client.connection_lost(ConnectionResetError())
            self.client = self._client()
            return
        upstream.data_received(HEAD + CHUNK)
        if ending == "whole":
            upstream.data_received(CHUNK + END)
        elif ending == "client_leaves_mid":
            client.connection_lost(ConnectionResetError())
            self.client = self._client()
            return
        else:
            if ending == "replica_leaves_table_then_breaks":
                self.replica.in_table = False
            upstream.connection_lost(ConnectionResetError())
            self.replica.in_table = True
        self.closed(client, transport)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(ENDINGS)), min_size=1, max_size=12))
def test_every_request_is_counted_once_with_how_it_ended(endings: list[str]) -> None:
    async def scenario() -> None:
        bench = Bench()
        for ending in endings:
            bench.run(ending)
        outcomes = [outcome for _, outcome in bench.metrics.seen]
        assert outcomes == [ENDINGS[e] for e in endings]
        assert len({id(ex) for ex, _ in bench.metrics.seen}) == len(endings)
        counted = sum(bench.metrics.requests.values())
        assert counted == len(endings)
        assert bench.replica.inflight == 0  # nothing left holding a slot

    asyncio.run(scenario())
