"""WebSockets through the load balancer: an upgraded connection becomes a byte tunnel.

A client's ``GET`` with ``Connection: upgrade`` and ``Upgrade: websocket`` is
parsed like any request (limits, blocked paths, X-Forwarded-For), then handed
here (downstream.py calls ``WebSockets.start`` when httptools stops at the
upgrade). The replica is chosen by the service's policy and the socket holds
one of its slots for its whole life, so least-load sees it and draining waits
for it. The request head goes to the replica with the upgrade headers put back;
the replica's ``101 Switching Protocols`` (or whatever it answers instead) goes
to the client unchanged, and from then on bytes are piped both ways with
backpressure. A WebSocket is never retried on another replica once its head was
sent (a refused connection is, like any request).

Draining: when a replica leaves the route table, its sockets stay open for
``websocket_drain_s``; then the load balancer sends the client a close frame
1001 "going away" and closes the replica side. The close frame goes between two
of the replica's frames, never inside one (``FrameTracker`` follows the frame
boundaries of the replica-to-client stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import TYPE_CHECKING, Any

from steadyserve.lb.exchange import READY
from steadyserve.lb.http import set_nodelay, simple_response
from steadyserve.lb.zero import ASK_AGAIN_S

if TYPE_CHECKING:
    from steadyserve.lb.balancer import ReplicaState
    from steadyserve.lb.downstream import ClientConnection
    from steadyserve.lb.proxy import Proxy
    from steadyserve.wire.routes import RouteTable

log = logging.getLogger("steadyserve.lb")

GOING_AWAY = 1001
_REASON = b"going away"
# An unmasked (server-to-client) close frame: FIN + opcode 8, code 1001, reason.
CLOSE_GOING_AWAY = bytes((0x88, 2 + len(_REASON))) + struct.pack("!H", GOING_AWAY) + _REASON
MAX_RESPONSE_HEAD = 64 * 1024
MAX_ATTEMPTS = 3
CONNECT_TIMEOUT = 5.0


def is_websocket_upgrade(method: bytes, upgrade: bytes | None, http10: bool) -> bool:
    """A request this load balancer tunnels: ``GET`` with ``Upgrade: websocket``."""
    return (
        method == b"GET"
        and not http10
        and upgrade is not None
        and b"websocket" in (t.strip().lower() for t in upgrade.split(b","))
    )


def accepts_websocket(proxy: Proxy, method: bytes, upgrade: bytes | None, parser: Any) -> bool:
    """Will this load balancer tunnel the upgrade request being parsed?"""
    return proxy.websockets is not None and is_websocket_upgrade(
        method, upgrade, parser.get_http_version() == "1.0"
    )


def hand_over(client: ClientConnection, rest: bytes) -> bool:
    """httptools stopped at an upgrade: make the connection a tunnel, if it is the
    WebSocket handshake ``on_headers_complete`` accepted and nothing is ahead of it."""
    hub = client.proxy.websockets
    exchanges = client.exchanges
    if (
        hub is None
        or len(exchanges) != 1
        or exchanges[0].state is not READY
        or not exchanges[0].head
    ):
        return False
    hub.start(client, exchanges[0].head, rest)
    return True


class FrameTracker:
    """Follows WebSocket frame boundaries in one direction of a tunnel (RFC 6455 5.2)."""

    __slots__ = ("_header", "_remaining")

    def __init__(self) -> None:
        self._header = bytearray()  # a frame header still incomplete
        self._remaining = 0  # payload bytes of the current frame still to come

    @property
    def at_boundary(self) -> bool:
        return self._remaining == 0 and not self._header

    def advance(self, data: bytes, stop_at_boundary: bool = False) -> int:
        """Follow ``data``; the bytes consumed (all, unless ``stop_at_boundary``:
        then up to the end of the frame under way, 0 when already between frames)."""
        i, n = 0, len(data)
        if stop_at_boundary and self.at_boundary:
            return 0
        while i < n:
            if self._remaining:
                step = min(self._remaining, n - i)
                self._remaining -= step
                i += step
            else:
                self._header.append(data[i])
                i += 1
                length = _frame_length(self._header)
                if length is None:
                    continue
                self._header.clear()
                self._remaining = length
            if stop_at_boundary and self.at_boundary:
                break
        return i


def _frame_length(header: bytearray) -> int | None:
    """The payload length once ``header`` is a whole frame header, else None."""
    if len(header) < 2:
        return None
    short = header[1] & 0x7F
    extended = 2 if short == 126 else 8 if short == 127 else 0
    size = 2 + extended + (4 if header[1] & 0x80 else 0)
    if len(header) < size:
        return None
    if extended == 2:
        return int(struct.unpack_from("!H", header, 2)[0])
    if extended == 8:
        return int(struct.unpack_from("!Q", header, 2)[0])
    return short


class _Side(asyncio.Protocol):
    """One end of a tunnel; everything it sees goes to the tunnel."""

    def __init__(self, tunnel: Tunnel, upstream: bool) -> None:
        self.tunnel = tunnel
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.upstream:
            set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        if self.upstream:
            self.tunnel.from_replica(data)
        else:
            self.tunnel.from_client(data)

    def eof_received(self) -> bool | None:
        self.tunnel.finish()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.tunnel.finish()

    def pause_writing(self) -> None:
        self.tunnel.pause(reader_of_upstream=not self.upstream)

    def resume_writing(self) -> None:
        self.tunnel.resume(reader_of_upstream=not self.upstream)


class Tunnel:
    """One upgraded client connection and its replica connection."""

    def __init__(
        self, hub: WebSockets, client: asyncio.Transport, head: bytes, early: bytes
    ) -> None:
        self.hub = hub
        self.client = client
        self.head = head
        self.early = [early] if early else []
        self.upstream: asyncio.Transport | None = None
        self.replica: ReplicaState | None = None
        # The replica's response head until complete; None once a refusal went through.
        self.response: bytearray | None = bytearray()
        self.switched = False  # the replica answered 101
        self.rid: int | None = None  # the replica, for the open count, once switched
        self.frames = FrameTracker()
        self.going_away = False
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None

    async def connect(self) -> None:
        """Choose a replica and open the connection (a refused one: the next)."""
        proxy = self.hub.proxy
        tried: set[int] = set()
        for _ in range(MAX_ATTEMPTS):
            replica = proxy.balancer.choose(tried or None)
            if replica is None and not tried and await self._wait_from_zero():
                replica = proxy.balancer.choose(None)
            if replica is None:
                break
            self.replica = replica
            replica.requests += 1
            try:
                transport, _ = await asyncio.wait_for(
                    proxy.loop.create_connection(
                        lambda: _Side(self, upstream=True), replica.host, replica.port
                    ),
                    CONNECT_TIMEOUT,
                )
            except (OSError, asyncio.TimeoutError) as exc:
                log.warning("replica %d refused a WebSocket connection: %r", replica.id, exc)
                proxy.metrics.connect_failures += 1
                proxy.balancer.eject(replica)
                self._release()
                tried.add(replica.id)
                continue
            if self.closed:  # the client left meanwhile
                transport.close()
                return
            self.upstream = transport  # type: ignore[assignment]
            self.upstream.write(self.head)  # type: ignore[union-attr]
            if self.early:
                self.upstream.writelines(self.early)  # type: ignore[union-attr]
                self.early = []
            self.hub.opened(self)
            self.client.resume_reading()
            return
        status = 502 if tried else 503
        message = "no replica accepted the WebSocket" if tried else "no replica can take it now"
        if not self.closed:
            self.client.write(simple_response(status, message, close=True))
        self.finish()

    async def _wait_from_zero(self) -> bool:
        """At zero replicas of a service that scales to zero: ask the controller for
        one (as lb/zero.py does for requests) and wait for it, at most
        ``hold_at_zero_s``. False when that does not apply or none came."""
        proxy = self.hub.proxy
        zero = proxy.zero
        if zero is None or not zero.active():
            return False
        deadline = proxy.now() + zero.hold_s
        next_ask = proxy.now()
        while not self.closed and proxy.now() < deadline:
            if not zero.active():
                return True  # a table with a replica arrived
            if proxy.now() >= next_ask:
                next_ask = proxy.now() + ASK_AGAIN_S
                zero.asks += 1
                await zero.ask_controller()
            await asyncio.sleep(0.05)
        return False

    # -- data ------------------------------------------------------------------------
    def from_client(self, data: bytes) -> None:
        if self.upstream is None:
            self.early.append(data)
        elif not self.going_away:
            self.upstream.write(data)

    def from_replica(self, data: bytes) -> None:
        if not self.switched:
            response = self.response
            if response is None:
                self.client.write(data)  # the rest of a refusal, passed on as it is
                return
            response += data
            end = response.find(b"\r\n\r\n")
            if end < 0:
                if len(response) > MAX_RESPONSE_HEAD:
                    self.finish()
                return
            head, data = bytes(response[: end + 4]), bytes(response[end + 4 :])
            self.switched = head.split(b" ", 2)[1:2] == [b"101"]
            self.response = None
            self.client.write(head)
            if not self.switched:
                self.client.write(data)
                return
            self.hub.switched(self)
        if self.going_away:
            used = self.frames.advance(data, stop_at_boundary=True)
            self.client.write(data[:used])
            if self.frames.at_boundary:
                self._say_going_away()
            return
        self.frames.advance(data)
        self.client.write(data)

    def pause(self, reader_of_upstream: bool) -> None:
        source = self.upstream if reader_of_upstream else self.client
        if source is not None:
            with contextlib.suppress(RuntimeError):
                source.pause_reading()

    def resume(self, reader_of_upstream: bool) -> None:
        source = self.upstream if reader_of_upstream else self.client
        if source is not None and not self.closed:
            with contextlib.suppress(RuntimeError):
                source.resume_reading()

    # -- draining and closing ---------------------------------------------------------
    def drain(self) -> None:
        """The replica is leaving: 1001 to the client now, between two frames."""
        self.timer = None
        if self.closed or self.going_away:
            return
        self.going_away = True
        if not self.switched:
            self.finish()
        elif self.frames.at_boundary:
            self._say_going_away()
        # else: from_replica sends it when the frame under way ends

    def _say_going_away(self) -> None:
        self.client.write(CLOSE_GOING_AWAY)
        self.hub.went_away += 1
        self.finish()

    def finish(self) -> None:
        """Close both sides (each flushes what it was given) and free the slot."""
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self._release()
        self.hub.closed(self)

    def _release(self) -> None:
        replica, self.replica = self.replica, None
        if replica is not None:
            self.hub.proxy._release(replica)


class WebSockets:
    """The load balancer's tunnels: start them, count them, drain them."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.tunnels: set[Tunnel] = set()
        self.drain_s = 10.0
        self.open: dict[int, int] = {}  # replica id -> switched tunnels now
        self.total: dict[int, int] = {}  # replica id -> switched tunnels since start
        self.went_away = 0  # closed by the load balancer with 1001
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, client: ClientConnection, head: bytes, early: bytes) -> None:
        """Take over ``client``'s connection (its request head is parsed) as a tunnel."""
        transport = client.transport
        assert transport is not None
        proxy = self.proxy
        client.exchanges.clear()
        client.parsing = None
        client.closing = True  # the ClientConnection is done; the tunnel owns the socket
        proxy.clients.discard(client)
        tunnel = Tunnel(self, transport, head, early)
        transport.set_protocol(_Side(tunnel, upstream=False))
        transport.pause_reading()  # until the replica connection is open
        self.tunnels.add(tunnel)
        task = proxy.loop.create_task(tunnel.connect())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def opened(self, tunnel: Tunnel) -> None:
        if self.proxy.draining or (tunnel.replica is not None and not tunnel.replica.in_table):
            self._schedule(tunnel)

    def switched(self, tunnel: Tunnel) -> None:
        rid = tunnel.rid = tunnel.replica.id if tunnel.replica is not None else 0
        self.open[rid] = self.open.get(rid, 0) + 1
        self.total[rid] = self.total.get(rid, 0) + 1

    def closed(self, tunnel: Tunnel) -> None:
        self.tunnels.discard(tunnel)
        rid = tunnel.rid
        if rid is not None:
            self.open[rid] = max(0, self.open.get(rid, 0) - 1)

    def _schedule(self, tunnel: Tunnel, after: float | None = None) -> None:
        if tunnel.timer is None and not tunnel.going_away:
            delay = self.drain_s if after is None else after
            tunnel.timer = self.proxy.loop.call_later(delay, tunnel.drain)

    def apply_table(self, table: RouteTable) -> None:
        """Sockets to replicas that left the table go away after ``websocket_drain_s``."""
        self.drain_s = table.websocket_drain_s
        for tunnel in list(self.tunnels):
            replica = tunnel.replica
            if replica is not None and not replica.in_table:
                self._schedule(tunnel)

    def stop(self, grace: float) -> None:
        """The load balancer is stopping: every socket goes away after ``grace``."""
        for tunnel in list(self.tunnels):
            self._schedule(tunnel, min(grace, self.drain_s))

    def close_all(self) -> None:
        for tunnel in list(self.tunnels):
            tunnel.finish()
        for task in list(self._tasks):
            task.cancel()

    def report(self) -> dict[str, Any]:
        return {
            "websockets_open": {str(k): v for k, v in self.open.items() if v},
            "websockets_total": {str(k): v for k, v in self.total.items()},
            "websockets_going_away": self.went_away,
        }
