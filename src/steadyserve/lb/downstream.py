"""A client's connection to the load balancer: parse requests, answer them in order.

Requests are parsed with httptools. The head sent to the replica is rebuilt from
the parsed pieces (request line forced to HTTP/1.1, hop-by-hop headers dropped,
``X-Forwarded-For`` appended); the body is streamed as it arrives, re-chunked when
the client chunked it. Pipelined requests are queued and answered one at a time.

Limits are checked while parsing: a head over ``max_header_bytes`` gets 431, a body
over ``max_body_bytes`` 413 (Content-Length up front, chunked as it flows), a
malformed request 400; each then closes the connection.

Hostile clients are bounded here too (docs/load-balancer.md): the target is
normalised once (target.py) and the Host header must appear exactly once; a head
must arrive within ``header_timeout_s`` and a body must keep moving within
``body_timeout_s`` (one timer per phase, armed only when a phase spans reads, so a
request that arrives in one read costs no timer); a body is read whole (up to
REQUEST_BUFFER_BYTES) before a replica is chosen, so a slow upload never holds a
replica slot; a client that reads nothing of its response for ``send_timeout`` is
dropped.

What a head says and whether it is accepted is ``request_head.py``'s (pure,
tested without sockets); the timeouts and refusals are ``client_guards.py``'s
functions. This class is the conversation: bytes in, callbacks, the order of
answers, flow control.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import cast

import httptools

from steadyserve.lb import client_guards as guards
from steadyserve.lb.client_guards import (
    PAUSE_BODY,
    PAUSE_BROKEN,
    PAUSE_PIPELINE,
    PAUSE_UPGRADE,
    PAUSE_UPSTREAM,
    received_line,
)
from steadyserve.lb.declined_upgrade import parser_after
from steadyserve.lb.exchange import DONE, READY, SENT, Exchange
from steadyserve.lb.http import set_nodelay, simple_response
from steadyserve.lb.local_answer import answer, target_of
from steadyserve.lb.proxy import Proxy
from steadyserve.lb.request_head import (
    BUFFER,
    CONTINUE,
    DISPATCH,
    REJECT,
    RequestHead,
    RequestRejected,
    decide,
)
from steadyserve.lb.retry import hold
from steadyserve.lb.websocket import after_refusal, hold_for_answer
from steadyserve.wire.counts import CLIENT_ABORTED, COMPLETED

log = logging.getLogger("steadyserve.lb")

BODY_BUFFER_LIMIT = 256 * 1024  # request body held while no replica connection is ready
# Request buffering: a body up to this size is read whole before a replica is
# chosen, so a slow client never holds a replica slot; a larger one is streamed
# from this point on (docs/load-balancer.md).
REQUEST_BUFFER_BYTES = 64 * 1024
PIPELINE_LIMIT = 16  # requests parsed ahead of the one being answered


class ClientConnection(asyncio.Protocol):
    """One client's connection: parses requests, answers them in order."""

    __slots__ = (
        "_head_fed",
        "body_bytes",
        "bytes_in",
        "bytes_out",
        "closing",
        "exchanges",
        "head",
        "held",
        "idle_since",
        "in_head",
        "on_header",
        "on_url",
        "parser",
        "parsing",
        "proxy",
        "read_paused",
        "send_timer",
        "timer",
        "timer_mark",
        "transport",
        "upgrading",
        "write_paused",
    )

    def __init__(self, proxy: Proxy, head: RequestHead | None = None) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        # The head's own callbacks, as attributes: httptools looks its callbacks up
        # once, so it calls the RequestHead's directly, with no hop through here.
        self.head = head = RequestHead() if head is None else head
        self.on_url = head.on_url
        self.on_header = head.on_header
        self.parser = httptools.HttpRequestParser(self)
        self.exchanges: deque[Exchange] = deque()
        self.parsing: Exchange | None = None
        self.read_paused = 0  # PAUSE_* bits (client_guards.py)
        self.write_paused = False
        self.closing = False
        self.idle_since = 0.0
        self.in_head = False
        self._head_fed = 0
        # A WebSocket handshake awaiting the replica's answer, and the client's bytes
        # after its head: held, never forwarded, until the answer is a 101.
        self.upgrading: Exchange | None = None
        self.held = b""
        self.body_bytes = 0
        self.timer: asyncio.TimerHandle | None = None  # the head or body timeout
        self.timer_mark = -1
        self.send_timer: asyncio.TimerHandle | None = None  # armed while writing is paused
        self.bytes_in = 0  # since the last finished request (metrics)
        self.bytes_out = 0

    # -- asyncio.Protocol ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        set_nodelay(transport)
        peer = transport.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) and peer else ""
        self.head.peer(str(ip).encode())
        proxy = self.proxy
        self.idle_since = proxy.now()
        # Open WebSockets count too: each is a client socket and a replica socket.
        full = len(proxy.clients) + proxy.tunnels >= proxy.max_connections
        if full and not guards.make_room(proxy):
            # Every connection is busy with a request: refuse this one at once
            # rather than run the process out of file descriptors.
            self.closing = True
            self.transport.write(
                simple_response(503, "too many connections to the load balancer", close=True)
            )
            self.transport.close()
            return
        proxy.clients.add(self)
        # A new connection must send its first request head within header_timeout_s.
        guards.arm(self, proxy.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        proxy = self.proxy
        proxy.clients.discard(self)
        guards.stop_timers(self)
        exchanges = list(self.exchanges)
        self.exchanges.clear()
        self.parsing = None
        for ex in exchanges:
            if ex.state is not DONE and ex.outcome == COMPLETED:
                ex.outcome = CLIENT_ABORTED  # the client left first
            proxy.abort(ex)
            if ex.head:  # a whole request head was read: it gets its one access-log line
                proxy.metrics.record(ex, self)

    def data_received(self, data: bytes) -> None:
        if self.closing or self.read_paused & PAUSE_BROKEN:
            return
        in_head = self.in_head
        self.bytes_in += len(data)
        while True:  # more than once only after a declined upgrade; each pass eats a head
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserCallbackError as exc:
                err = exc.__context__
                if isinstance(err, RequestRejected):
                    guards.reject(self, err.status, err.message, err.reason)
                else:
                    guards.broken(self, err)
                return
            except httptools.HttpParserUpgrade as exc:
                data = data[int(exc.args[0]) :]
                head = self.head
                framing = head.declined
                if framing is None:
                    # A WebSocket handshake is parsed: route it like any request, and
                    # hold what follows until the replica answers (lb/websocket.py).
                    hold_for_answer(self, data)
                    return
                # A declined upgrade, served as HTTP/1.1: read on with a new parser.
                head.declined = None
                self.parser = parser_after(self, framing)
                if data and not self.closing:
                    continue
            except httptools.HttpParserError as exc:
                # When nothing of the request line parsed, log the bytes that failed.
                received = None if self.head.url else received_line(data)
                guards.reject(self, 400, f"malformed request: {exc}", "malformed", received)
                return
            break
        if self.in_head:
            if in_head:
                # Bytes of a head still incomplete: bound what httptools buffers meanwhile.
                self._head_fed += len(data)
                if self._head_fed > self.proxy.max_header_bytes:
                    guards.reject(self, 431, "request header fields too large", "headers_too_large")
                    return
            if self.timer is None:
                guards.arm(self, self.proxy.limits.header_timeout_s)
        elif self.parsing is not None and self.timer is None:
            guards.arm(self, self.proxy.limits.body_timeout_s)  # a body still on its way

    def reading_first_head(self) -> bool:
        """Is the only request on this connection a head still being read?"""
        return len(self.exchanges) == 1 and self.in_head

    # -- httptools callbacks (on_url and on_header are the RequestHead's) -----------
    def on_message_begin(self) -> None:
        self.in_head = True
        self._head_fed = 0
        head = self.head
        if head.marked:
            head.begin()
        else:
            # RequestHead.begin of an unmarked head, inline: the call would cost more
            # than its three stores, on every request (tests/lb/test_request_head.py
            # holds the two to the same state).
            head.lines = []
            head.url = b""
            head.hosts = 0
        self.body_bytes = 0
        ex = Exchange(self)
        self.parsing = ex
        exchanges = self.exchanges
        exchanges.append(ex)
        if len(exchanges) > PIPELINE_LIMIT:
            self.pause_reading(PAUSE_PIPELINE)

    def on_headers_complete(self) -> None:
        ex = self.parsing
        assert ex is not None
        self.in_head = False
        if self.timer is not None:
            guards.disarm(self)
        parser = self.parser
        head = self.head
        proxy = self.proxy
        keep_alive = parser.should_keep_alive()
        move = decide(
            head,
            ex,
            parser.get_method(),
            # Kept alive with no Connection header is 1.1: spares get_http_version().
            None if keep_alive and not head.connection_seen else parser.get_http_version(),
            keep_alive,
            head.upgrade and parser.should_upgrade(),
            proxy,
        )
        if move is DISPATCH:  # the common case first: no body, no 100 Continue
            proxy.ready(ex)
            if self.exchanges[0] is ex:
                proxy.dispatch(ex)
            return
        if head.continue_100 and self.exchanges[0] is ex:
            self.write(CONTINUE)
        if move is REJECT:
            rejected = head.rejected
            assert rejected is not None
            raise rejected
        proxy.ready(ex)
        if move is BUFFER:
            ex.buffering = True  # dispatched once the body is read (or large)
        else:
            self.upgrading = ex  # routed by hold_for_answer, once httptools stops there

    def on_body(self, body: bytes) -> None:
        ex = self.parsing
        assert ex is not None
        self.body_bytes += len(body)
        if self.head.chunked_te is not None:
            if self.body_bytes > self.proxy.max_body_bytes:
                raise RequestRejected(413, "request body too large", "body_too_large")
            if body:
                self._send_body(ex, b"%x\r\n%s\r\n" % (len(body), body))
        else:
            self._send_body(ex, body)

    def on_message_complete(self) -> None:
        head = self.head
        if head.declined:  # httptools skipped a declined upgrade's body: not complete yet
            return
        ex = self.parsing
        assert ex is not None
        self.parsing = None
        if self.timer is not None:
            guards.disarm(self)
        if head.chunked_te is not None:
            self._send_body(ex, b"0\r\n\r\n")
        ex.request_done = True
        if ex.buffering:
            ex.buffering = False
            if ex.state is READY and self.exchanges[0] is ex:
                self.proxy.dispatch(ex)
        elif ex.state is DONE:
            self.exchange_done(ex)  # answered before its body had all arrived

    # -- request body ------------------------------------------------------------
    def _send_body(self, ex: Exchange, data: bytes) -> None:
        state = ex.state
        if state is SENT:
            conn = ex.upstream
            assert conn is not None
            conn.send(data)
            if ex.held_size >= 0:
                hold(ex, [data], len(data))
        elif state is not DONE:
            if ex.pending is None:
                ex.pending = [data]
            else:
                ex.pending.append(data)
            ex.pending_size += len(data)
            if ex.buffering:
                if ex.pending_size >= REQUEST_BUFFER_BYTES:
                    # Too large to hold whole: route it now and stream the rest.
                    ex.buffering = False
                    if self.exchanges[0] is ex:
                        self.proxy.dispatch(ex)
            elif ex.pending_size > BODY_BUFFER_LIMIT:
                self.pause_reading(PAUSE_BODY)

    # -- responses ------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not self.closing:
            transport.write(data)
            self.bytes_out += len(data)

    def write_many(self, data: list[bytes]) -> None:
        transport = self.transport
        if transport is not None and not self.closing:
            transport.writelines(data)
            self.bytes_out += sum(map(len, data))

    def respond_local(self, ex: Exchange, status: int, message: str) -> None:
        """Answer ``ex`` from the load balancer itself (OpenAI-shaped on ``/v1/``)."""
        if self.proxy.draining:
            ex.keep_alive = False
        reason = getattr(ex, "reason", None)
        close = not ex.keep_alive
        data = answer(status, message, reason, target_of(ex.head), close, ex.method_head)
        self.respond_with(ex, status, data)

    def respond_with(self, ex: Exchange, status: int, data: bytes) -> None:
        """Answer ``ex`` with ``data``, a whole response the load balancer made."""
        if self.proxy.draining:
            ex.keep_alive = False  # ``data`` says so: it was made with the proxy's state
        ex.status = status
        self.write(data)
        self.response_done(ex)

    def response_done(self, ex: Exchange) -> None:
        """The response to ``ex`` is written; move on once its request is read too."""
        if ex.request_done or not ex.keep_alive:
            self.exchange_done(ex)
        # else: on_message_complete finishes it, discarding the rest of the body

    def abort_response(self, ex: Exchange) -> None:
        """The response broke mid-body: the only honest signal left is closing."""
        self.close()

    def exchange_done(self, ex: Exchange) -> None:
        exchanges = self.exchanges
        if not exchanges or exchanges[0] is not ex:
            return
        exchanges.popleft()
        self.proxy.metrics.record(ex, self)
        if self.read_paused:
            self.resume_reading(PAUSE_UPSTREAM)
            if self.read_paused & PAUSE_PIPELINE and len(exchanges) <= PIPELINE_LIMIT:
                self.resume_reading(PAUSE_PIPELINE)
            if self.read_paused & PAUSE_UPGRADE and ex is self.upgrading:
                after_refusal(self, ex)  # HTTP again, or closed
                return
        if not ex.keep_alive or (self.proxy.draining and not exchanges):
            self.close()
            return
        if exchanges:
            nxt = exchanges[0]
            if nxt.local is not None:
                self.serve_local(nxt)
            elif nxt.state is READY and not nxt.buffering:
                self.proxy.dispatch(nxt)
        else:
            self.idle_since = self.proxy.now()

    def serve_local(self, ex: Exchange) -> None:
        data = ex.local
        assert data is not None
        self.proxy.answered_locally(ex)
        self.write(data)
        self.exchange_done(ex)

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.proxy.clients.discard(self)  # no longer counts towards max_connections
            if self.transport is not None:
                self.transport.close()

    # -- flow control ------------------------------------------------------------------
    def pause_reading(self, reason: int) -> None:
        if not self.read_paused and self.transport is not None and not self.closing:
            self.transport.pause_reading()
        self.read_paused |= reason

    def resume_reading(self, reason: int) -> None:
        if self.read_paused & reason:
            self.read_paused &= ~reason
            if not self.read_paused and self.transport is not None and not self.closing:
                self.transport.resume_reading()

    def body_flushed(self) -> None:
        """The buffered body went to the replica: read on."""
        self.resume_reading(PAUSE_BODY)

    def pause_reading_for_upstream(self) -> None:
        self.pause_reading(PAUSE_UPSTREAM)

    def resume_reading_for_upstream(self) -> None:
        self.resume_reading(PAUSE_UPSTREAM)

    def pause_writing(self) -> None:
        guards.writing_paused(self)

    def resume_writing(self) -> None:
        guards.writing_resumed(self)

    def stop_timers(self) -> None:
        guards.stop_timers(self)
