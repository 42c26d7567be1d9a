"""The limits a client connection enforces on its client: the head and body
timeouts, the send timeout, flow control, which connections to shed at
``max_connections``, the ``100 Continue`` the load balancer answers itself, and
the local answer that refuses a request and closes (408, 413, 431, 400 ...). A mixin of
:class:`~steadyserve.lb.downstream.ClientConnection` kept apart from the
per-request parsing path, which it never runs on.

A refused request is logged (when the access log is on) with a ``reason`` and
what was received of its request line: the method and target, each cut to a
bounded length (the access log escapes them)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import httptools

from steadyserve.lb.exchange import DONE, ROUTED, Exchange
from steadyserve.lb.http import simple_response

if TYPE_CHECKING:
    from steadyserve.lb.downstream import ClientConnection
    from steadyserve.lb.proxy import Proxy

log = logging.getLogger("steadyserve.lb")

# Why the connection stopped reading (bits)
PAUSE_BODY = 1
PAUSE_UPSTREAM = 2
PAUSE_PIPELINE = 4
PAUSE_BROKEN = 8
PAUSE_UPGRADE = 16  # a WebSocket handshake awaits the replica's answer (lb/websocket.py)

# What a refused request's log line shows of its request line, at most.
MAX_LOGGED_METHOD = 32
MAX_LOGGED_TARGET = 512


class RequestRejected(Exception):
    """Raised from a parser callback to answer the request locally and close.
    ``reason``: a short stable word for the access log (docs/observability.md)."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


def idle_victims(clients: Iterable[ClientConnection], batch: int) -> list[ClientConnection]:
    """At ``max_connections``: up to ``batch`` connections that hold no request,
    idle ones first, then ones still sending their first head, oldest first; never
    one busy with a request (a WebSocket is not a client connection any more)."""
    idle: list[tuple[float, ClientConnection]] = []
    reading: list[tuple[float, ClientConnection]] = []
    for client in clients:
        if not client.exchanges:
            idle.append((client.idle_since, client))
        elif client.reading_first_head():
            reading.append((client.idle_since, client))
    idle.sort(key=_first)
    reading.sort(key=_first)
    return [client for _, client in (idle + reading)[:batch]]


def _first(item: tuple[float, ClientConnection]) -> float:
    return item[0]


def received_line(data: bytes) -> bytes:
    """The start of a request line that did not parse, bounded: ``METHOD TARGET``."""
    line = data.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
    method, _, rest = line.partition(b" ")
    return method[:MAX_LOGGED_METHOD] + b" " + rest.split(b" ", 1)[0][:MAX_LOGGED_TARGET]


class ClientGuards:
    """Timeouts and refusals of one client connection (see the module's docstring)."""

    __slots__ = ("_send_timer", "_timer", "_timer_mark", "parsing", "read_paused", "write_paused")

    _send_timer: asyncio.TimerHandle | None  # armed while writing is paused
    _timer: asyncio.TimerHandle | None  # the head or body timeout
    _timer_mark: int
    parsing: Exchange | None
    write_paused: bool

    # Attributes and methods of the connection this is mixed into.
    proxy: Proxy
    transport: asyncio.Transport | None
    exchanges: deque[Exchange]
    read_paused: int  # PAUSE_* bits
    closing: bool
    body_bytes: int
    parser: httptools.HttpRequestParser
    _in_head: bool
    _url: bytes

    if TYPE_CHECKING:

        def close(self) -> None: ...
        def write(self, data: bytes) -> None: ...
        def _serve_local(self, ex: Exchange) -> None: ...
        def _exchange_done(self, ex: Exchange) -> None: ...

    def _arm(self, seconds: float) -> None:
        """One timer per phase (head, body), armed only when a phase spans reads."""
        self._timer_mark = self.body_bytes
        self._timer = self.proxy.loop.call_later(seconds, self._on_timer)

    def _disarm(self) -> None:
        timer = self._timer
        if timer is not None:
            self._timer = None
            timer.cancel()

    def _on_timer(self) -> None:
        self._timer = None
        if self.closing:
            return
        limits = self.proxy.limits
        if self.read_paused & ~PAUSE_BROKEN:
            # Not reading because of the proxy (backpressure, pipelining): not the
            # client's delay.
            self._arm(limits.body_timeout_s if self.parsing else limits.header_timeout_s)
            return
        if self._in_head:
            self._reject(408, "request header timeout", "header_timeout")
        elif self.parsing is not None:
            if self.body_bytes > self._timer_mark:
                self._arm(limits.body_timeout_s)  # progress since the last check
            else:
                self._reject(408, "request body timeout", "body_timeout")
        elif not self.exchanges:
            self.close()  # connected, never sent a byte

    def _send_timed_out(self) -> None:
        """The client read nothing of its response for send_timeout: let go of it
        (and of the replica connection its backpressure was holding)."""
        self._send_timer = None
        if self.write_paused and not self.closing:
            log.warning("client stopped reading its response; closing the connection")
            self.close()
            if self.transport is not None:
                self.transport.abort()  # close() would wait for the unread bytes to drain

    def stop_timers(self) -> None:
        for timer in (self._timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._send_timer = None

    def _received(self) -> bytes:
        """``METHOD TARGET`` of the request being parsed, as received and bounded
        (b"" before its target began: httptools' method is only valid by then)."""
        url = self._url
        if not url:
            return b""
        method: bytes = self.parser.get_method()
        return method[:MAX_LOGGED_METHOD] + b" " + url[:MAX_LOGGED_TARGET]

    def _reject(
        self, status: int, message: str, reason: str, received: bytes | None = None
    ) -> None:
        """Answer a request the proxy will not forward, then close the connection.
        ``received``: what to log of its request line (default: what was parsed)."""
        self.pause_reading(PAUSE_BROKEN)
        ex = self.parsing
        self.parsing = None
        exchanges = self.exchanges
        if (
            ex is not None
            and exchanges
            and exchanges[0] is ex
            and (ex.state in ROUTED or ex.state is DONE)
        ):
            # Already routed or answered: stop the replica side first.
            ex.reason = reason
            started = ex.response_started
            self.proxy.abort(ex)
            if started:
                self.close()
            else:
                ex.keep_alive = False
                ex.response_started = True
                ex.status = status
                self.write(simple_response(status, message, close=True))
                self._exchange_done(ex)
            return
        if ex is not None and exchanges and exchanges[-1] is ex:
            exchanges.pop()
        error = Exchange(cast("ClientConnection", self))
        error.reason = reason
        error.received = self._received() if received is None else received
        error.local = simple_response(status, message, close=True)
        error.status = status
        error.keep_alive = False
        error.request_done = True
        self.proxy.ready(error)
        exchanges.append(error)
        if exchanges[0] is error:
            self._serve_local(error)

    def _expect_continue(self, ex: Exchange, lines: list[bytes]) -> list[bytes]:
        """The load balancer reads the body before choosing a replica, so it answers
        ``Expect: 100-continue`` itself (as nginx does) and does not forward it."""
        for i in range(0, len(lines), 4):
            name = lines[i]
            if len(name) == 6 and name.lower() == b"expect":
                if lines[i + 2].strip().lower() == b"100-continue" and self.exchanges[0] is ex:
                    self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return lines[:i] + lines[i + 4 :]
        return lines

    # -- the client's side of backpressure ----------------------------------------
    def body_flushed(self) -> None:
        """The buffered body went to the replica: read on."""
        self.resume_reading(PAUSE_BODY)

    def pause_reading(self, reason: int) -> None:
        if not self.read_paused and self.transport is not None and not self.closing:
            self.transport.pause_reading()
        self.read_paused |= reason

    def resume_reading(self, reason: int) -> None:
        if self.read_paused & reason:
            self.read_paused &= ~reason
            if not self.read_paused and self.transport is not None and not self.closing:
                self.transport.resume_reading()

    def pause_reading_for_upstream(self) -> None:
        self.pause_reading(PAUSE_UPSTREAM)

    def resume_reading_for_upstream(self) -> None:
        self.resume_reading(PAUSE_UPSTREAM)

    def pause_writing(self) -> None:
        self.write_paused = True
        if self._send_timer is None and not self.closing:
            self._send_timer = self.proxy.loop.call_later(
                self.proxy.send_timeout, self._send_timed_out
            )
        if self.exchanges:
            conn = self.exchanges[0].upstream
            if conn is not None:
                conn.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        if self.exchanges:
            conn = self.exchanges[0].upstream
            if conn is not None:
                conn.resume_reading()
