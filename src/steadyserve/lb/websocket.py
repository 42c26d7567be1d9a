"""WebSockets through the load balancer: a handshake is a request; a 101 makes a tunnel.

A client's ``GET`` with ``Connection: upgrade`` and ``Upgrade: websocket`` is
parsed and routed like any request (limits, blocked paths, X-Forwarded-For, the
version pin, the preview port, ``request_timeout_s``, metrics, the access log),
with the upgrade headers put back on its way to the replica. Until the replica
answers, whatever the client sent after the handshake's head is held, never
forwarded (downstream.py). Then:

* ``101 Switching Protocols``: the upstream connection parses no more
  (upstream.py) and ``WebSockets.start`` joins the two sockets into a ``Tunnel``
  that pipes bytes both ways with backpressure. The tunnel keeps the replica
  slot its handshake took for its whole life, so least-load sees it and
  draining waits for it, and it counts towards ``max_connections``.
* anything else (``403``, ``200`` ...): an ordinary response, forwarded by its
  own framing; the client's connection is then parsed as HTTP again. A refusal
  never becomes a tunnel.

A handshake is never queued (503 when every replica is full) and never replayed
on another replica once sent (a refused connection is, like any request).

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

import httptools

from steadyserve.lb.client_guards import PAUSE_UPGRADE
from steadyserve.lb.exchange import READY
from steadyserve.lb.http import set_nodelay

if TYPE_CHECKING:
    from steadyserve.lb.balancer import ReplicaState
    from steadyserve.lb.downstream import ClientConnection
    from steadyserve.lb.exchange import Exchange
    from steadyserve.lb.proxy import Proxy
    from steadyserve.wire.routes import RouteTable

log = logging.getLogger("steadyserve.lb")

GOING_AWAY = 1001
_REASON = b"going away"
# An unmasked (server-to-client) close frame: FIN + opcode 8, code 1001, reason.
CLOSE_GOING_AWAY = bytes((0x88, 2 + len(_REASON))) + struct.pack("!H", GOING_AWAY) + _REASON


def is_websocket_upgrade(method: bytes, upgrade: bytes | None, http10: bool) -> bool:
    """A request this load balancer tunnels: ``GET`` with ``Upgrade: websocket``."""
    return (
        method == b"GET"
        and not http10
        and upgrade is not None
        and b"websocket" in (t.strip().lower() for t in upgrade.split(b","))
    )


# -- the client's side of a handshake (its ClientConnection, downstream.py) -----------
def hold_for_answer(client: ClientConnection, rest: bytes) -> None:
    """httptools stopped after a handshake's head: hold ``rest`` (and read no more)
    until the replica answers, and route the handshake (once it is first)."""
    ex = client.upgrading
    if ex is None or client.closing:
        return
    client.held = rest
    client.pause_reading(PAUSE_UPGRADE)
    if client.exchanges and client.exchanges[0] is ex and ex.state is READY:
        client.proxy.dispatch(ex)
    # else: earlier pipelined requests first; the connection routes it in turn


def after_refusal(client: ClientConnection, ex: Exchange) -> None:
    """The replica answered the handshake with something other than 101, now
    forwarded whole: the connection is HTTP again, read by a fresh parser (the old
    one parses nothing after an upgrade) starting with the held bytes; or closed."""
    client.upgrading = None
    held, client.held = client.held, b""
    if not ex.keep_alive or client.proxy.draining:
        client.close()
        return
    client.idle_since = client.proxy.now()
    client.parser = httptools.HttpRequestParser(client)
    client.resume_reading(PAUSE_UPGRADE)
    if held and not client.closing:
        client.bytes_in -= len(held)  # counted when they arrived
        client.data_received(held)


def switch(
    client: ClientConnection, ex: Exchange, upstream: asyncio.Transport, head: bytes, early: bytes
) -> None:
    """The replica answered ``ex``'s handshake with 101 (``head``, rebuilt): the
    client's socket and ``upstream`` become a tunnel. The ClientConnection is done
    with it: it no longer counts as a client (the tunnel counts instead)."""
    hub = client.proxy.websockets
    transport = client.transport
    client.write(head)
    held, client.held = client.held, b""
    client.upgrading = None
    client.closing = True
    client.proxy.clients.discard(client)
    client.stop_timers()
    exchanges = client.exchanges
    if exchanges and exchanges[0] is ex:
        exchanges.popleft()
    client.proxy.metrics.record(ex, client)  # the handshake is a request in the metrics
    if hub is None or transport is None:
        upstream.close()
        if transport is not None:
            transport.close()
        return
    hub.start(transport, upstream, ex.served, held, early)


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
        self,
        hub: WebSockets,
        client: asyncio.Transport,
        upstream: asyncio.Transport,
        replica: ReplicaState | None,
    ) -> None:
        self.hub = hub
        self.client = client
        self.upstream = upstream
        self.replica = replica  # holds one of its slots until the tunnel closes
        self.rid = replica.id if replica is not None else 0
        self.frames = FrameTracker()
        self.going_away = False
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None

    # -- data ------------------------------------------------------------------------
    def from_client(self, data: bytes) -> None:
        if not self.going_away:
            self.upstream.write(data)

    def from_replica(self, data: bytes) -> None:
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
        with contextlib.suppress(RuntimeError):
            source.pause_reading()

    def resume(self, reader_of_upstream: bool) -> None:
        source = self.upstream if reader_of_upstream else self.client
        if not self.closed:
            with contextlib.suppress(RuntimeError):
                source.resume_reading()

    # -- draining and closing ---------------------------------------------------------
    def drain(self) -> None:
        """The replica is leaving: 1001 to the client now, between two frames."""
        self.timer = None
        if self.closed or self.going_away:
            return
        self.going_away = True
        if self.frames.at_boundary:
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

    def start(
        self,
        client: asyncio.Transport,
        upstream: asyncio.Transport,
        replica: ReplicaState | None,
        held: bytes,
        early: bytes,
    ) -> None:
        """The replica answered 101: join ``client`` and ``upstream`` (both paused by
        their HTTP protocols) into a tunnel. ``held``: what the client sent after the
        handshake; ``early``: what the replica sent after its 101 head."""
        tunnel = Tunnel(self, client, upstream, replica)
        client.set_protocol(_Side(tunnel, upstream=False))
        upstream.set_protocol(_Side(tunnel, upstream=True))
        self.tunnels.add(tunnel)
        self.proxy.tunnels += 1
        rid = tunnel.rid
        self.open[rid] = self.open.get(rid, 0) + 1
        self.total[rid] = self.total.get(rid, 0) + 1
        if held:
            upstream.write(held)
        if early:
            tunnel.from_replica(early)
        if self.proxy.draining or (replica is not None and not replica.in_table):
            self._schedule(tunnel)
        for transport in (client, upstream):
            with contextlib.suppress(RuntimeError):
                transport.resume_reading()

    def closed(self, tunnel: Tunnel) -> None:
        if tunnel in self.tunnels:
            self.tunnels.discard(tunnel)
            self.proxy.tunnels -= 1
            self.open[tunnel.rid] = max(0, self.open.get(tunnel.rid, 0) - 1)

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

    def report(self) -> dict[str, Any]:
        return {
            "websockets_open": {str(k): v for k, v in self.open.items() if v},
            "websockets_total": {str(k): v for k, v in self.total.items()},
            "websockets_going_away": self.went_away,
        }
