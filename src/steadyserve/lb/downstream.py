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
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import cast

import httptools

from steadyserve.lb.client_guards import (
    PAUSE_BODY,
    PAUSE_BROKEN,
    PAUSE_PIPELINE,
    PAUSE_UPGRADE,
    PAUSE_UPSTREAM,
    ClientGuards,
    RequestRejected,
    received_line,
)
from steadyserve.lb.declined_upgrade import body_framing, parser_after
from steadyserve.lb.exchange import DONE, READY, SENT, Exchange
from steadyserve.lb.http import (
    HOP_BY_HOP,
    IDEMPOTENT_METHODS,
    PIN_HEADER,
    REQUEST_WATCHED_NAME_LENGTHS,
    connection_tokens,
    header_name,
    is_version_pin,
    set_nodelay,
    simple_response,
)
from steadyserve.lb.proxy import Proxy
from steadyserve.lb.target import BadTarget, is_blocked, is_plain, normalise
from steadyserve.lb.websocket import accepts_websocket, after_refusal, hold_for_answer

log = logging.getLogger("steadyserve.lb")

BODY_BUFFER_LIMIT = 256 * 1024  # request body held while no replica connection is ready
# Request buffering: a body up to this size is read whole before a replica is
# chosen, so a slow client never holds a replica slot; a larger one is streamed
# from this point on (docs/load-balancer.md).
REQUEST_BUFFER_BYTES = 64 * 1024
PIPELINE_LIMIT = 16  # requests parsed ahead of the one being answered


class ClientConnection(ClientGuards, asyncio.Protocol):
    """One client's connection: parses requests, answers them in order."""

    __slots__ = (
        "_chunked_te",
        "_conn_tokens",
        "_connection_seen",
        "_content_length",
        "_declined",
        "_head_fed",
        "_host_at",
        "_hosts",
        "_in_head",
        "_lines",
        "_upgrade",
        "_upgrade_to",
        "_url",
        "_xff",
        "_xff_end",
        "_xff_seen",
        "body_bytes",
        "bytes_in",
        "bytes_out",
        "closing",
        "exchanges",
        "held",
        "idle_since",
        "parser",
        "proxy",
        "transport",
        "upgrading",
    )

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.exchanges: deque[Exchange] = deque()
        self.parsing: Exchange | None = None
        self.read_paused = 0
        self.write_paused = False
        self.closing = False
        self.idle_since = 0.0
        self._xff = b""
        self._xff_end = b"\r\n"
        self._in_head = False
        self._head_fed = 0
        self._lines: list[bytes] = []
        self._url = b""
        self._chunked_te: bytes | None = None
        self._content_length = 0
        # Set by a declined upgrade's head: its body's framing (declined_upgrade.py).
        self._declined: bytes | None = None
        # A WebSocket handshake awaiting the replica's answer, and the client's bytes
        # after its head: held, never forwarded, until the answer is a 101.
        self.upgrading: Exchange | None = None
        self.held = b""
        self._conn_tokens: set[bytes] | None = None
        self._connection_seen = False
        self._upgrade = False
        self._upgrade_to: bytes | None = None  # the Upgrade header (lb/websocket.py)
        self._xff_seen = False
        self._hosts = 0
        self._host_at = -1
        self.body_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_mark = -1
        self._send_timer: asyncio.TimerHandle | None = None  # armed while writing is paused
        self.bytes_in = 0  # since the last finished request (metrics)
        self.bytes_out = 0

    # -- asyncio.Protocol ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        set_nodelay(transport)
        peer = transport.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) and peer else ""
        self._xff = str(ip).encode()
        self._xff_end = b"x-forwarded-for: %s\r\n\r\n" % self._xff
        proxy = self.proxy
        self.idle_since = proxy.now()
        # Open WebSockets count too: each is a client socket and a replica socket.
        if len(proxy.clients) + proxy.tunnels >= proxy.max_connections and not proxy.make_room():
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
        self._timer = proxy.loop.call_later(proxy.limits.header_timeout_s, self._on_timer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.proxy.clients.discard(self)
        self.stop_timers()
        exchanges = list(self.exchanges)
        self.exchanges.clear()
        self.parsing = None
        for ex in exchanges:
            self.proxy.abort(ex)

    def data_received(self, data: bytes) -> None:
        if self.closing or self.read_paused & PAUSE_BROKEN:
            return
        in_head = self._in_head
        self.bytes_in += len(data)
        while True:  # more than once only after a declined upgrade; each pass eats a head
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserCallbackError as exc:
                err = exc.__context__
                if isinstance(err, RequestRejected):
                    self._reject(err.status, err.message, err.reason)
                else:
                    log.error("internal error while proxying", exc_info=err)
                    self._reject(500, "internal load balancer error", "internal_error")
                return
            except httptools.HttpParserUpgrade as exc:
                data = data[int(exc.args[0]) :]
                framing = self._declined
                if framing is None:
                    # A WebSocket handshake is parsed: route it like any request, and
                    # hold what follows until the replica answers (lb/websocket.py).
                    hold_for_answer(self, data)
                    return
                # A declined upgrade, served as HTTP/1.1: read on with a new parser.
                self._declined = None
                self.parser = parser_after(self, framing)
                if data and not self.closing:
                    continue
            except httptools.HttpParserError as exc:
                # When nothing of the request line parsed, log the bytes that failed.
                received = None if self._url else received_line(data)
                self._reject(400, f"malformed request: {exc}", "malformed", received)
                return
            break
        if self._in_head:
            if in_head:
                # Bytes of a head still incomplete: bound what httptools buffers meanwhile.
                self._head_fed += len(data)
                if self._head_fed > self.proxy.max_header_bytes:
                    self._reject(431, "request header fields too large", "headers_too_large")
                    return
            if self._timer is None:
                self._arm(self.proxy.limits.header_timeout_s)
        elif self.parsing is not None and self._timer is None:
            self._arm(self.proxy.limits.body_timeout_s)  # a body still on its way

    def reading_first_head(self) -> bool:
        """Is the only request on this connection a head still being read?"""
        return len(self.exchanges) == 1 and self._in_head

    # -- httptools callbacks ------------------------------------------------------
    def on_message_begin(self) -> None:
        self._in_head = True
        self._head_fed = 0
        self._lines = []
        self._url = b""
        self._chunked_te = None
        self._content_length = 0
        self._conn_tokens = None
        self._connection_seen = False
        self._upgrade = False
        self._upgrade_to = None
        self._xff_seen = False
        self._hosts = 0
        self.body_bytes = 0
        ex = Exchange(self)
        self.parsing = ex
        exchanges = self.exchanges
        exchanges.append(ex)
        if len(exchanges) > PIPELINE_LIMIT:
            self.pause_reading(PAUSE_PIPELINE)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) in REQUEST_WATCHED_NAME_LENGTHS:
            lname = name.lower()
            if lname in HOP_BY_HOP:
                if lname == b"transfer-encoding":
                    self._chunked_te = value
                elif lname == b"connection":
                    self._connection_seen = True
                    tokens = connection_tokens(value)
                    if b"upgrade" in tokens:
                        self._upgrade = True
                    tokens -= {b"close", b"keep-alive", b"upgrade"}
                    if tokens:
                        self._conn_tokens = (self._conn_tokens or set()) | tokens
                elif lname == b"upgrade":
                    self._upgrade_to = value
                return
            if lname == PIN_HEADER:  # pin to a version, never forwarded
                self._pin(value)
                return
            if lname == b"content-length":
                try:
                    self._content_length = int(value)
                except ValueError:
                    raise RequestRejected(
                        400, "malformed request: bad Content-Length", "bad_content_length"
                    ) from None
            elif lname == b"x-forwarded-for":
                self._xff_seen = True
                value = b"%s, %s" % (value, self._xff)
            elif lname == b"host":
                self._hosts += 1
                self._host_at = len(self._lines) + 2
        self._lines += (name, b": ", value, b"\r\n")

    def _pin(self, value: bytes) -> None:
        ex = self.parsing
        if ex is None or not is_version_pin(value):
            raise RequestRejected(
                400,
                "X-Steady-Version must be a version number (1, 2, ...): digits only, "
                "no sign, space or leading zero",
                "bad_version_pin",
            )
        ex.pin = int(value)

    def on_headers_complete(self) -> None:
        ex = self.parsing
        assert ex is not None
        self._in_head = False
        if self._timer is not None:
            self._disarm()
        parser = self.parser
        method: bytes = parser.get_method()
        upgrade_to = self._upgrade_to
        if method == b"CONNECT":
            raise RequestRejected(
                501, "CONNECT is not supported: this is not a forward proxy", "connect_method"
            )
        websocket = self._upgrade and accepts_websocket(self.proxy, method, upgrade_to, parser)
        if self._upgrade and not websocket and parser.should_upgrade():
            # Declined (h2c and the like): served as HTTP/1.1, as nginx does.
            self._declined = body_framing(self._content_length, self._chunked_te is not None)
        if self._content_length > self.proxy.max_body_bytes:
            raise RequestRejected(413, "request body too large", "body_too_large")
        keep_alive = parser.should_keep_alive()
        # An HTTP/1.0 request is kept alive only with a Connection header, so
        # keep-alive without one is 1.1: spares get_http_version(), which formats a
        # str per call (a tenth of a microsecond, on every request).
        if keep_alive and not self._connection_seen:
            http10 = False
        else:
            version = parser.get_http_version()
            if version not in ("1.1", "1.0"):
                raise RequestRejected(505, f"HTTP/{version} is not supported here", "http_version")
            http10 = version == "1.0"
        if self._hosts != 1 and (self._hosts or not http10):
            raise RequestRejected(400, "a request needs exactly one Host header", "bad_host")
        url = self._url
        if not is_plain(url):
            try:
                url, authority = normalise(url, method)
            except BadTarget as exc:
                raise RequestRejected(400, f"bad request target: {exc}", "bad_target") from None
            if authority is not None and self._hosts:
                # Absolute-form: its authority is the host (RFC 9112 3.2.2).
                self._lines[self._host_at] = authority
        blocked = self.proxy.blocked_paths
        if blocked and is_blocked(url, blocked):
            raise RequestRejected(404, "not found", "blocked_path")
        ex.keep_alive = keep_alive
        ex.http10 = http10
        ex.method_head = head_request = method == b"HEAD"
        # HEAD: httptools would wait for the body the head announces; rebuild instead.
        ex.passthrough_ok = keep_alive and not http10 and not head_request
        chunked = self._chunked_te
        ex.idempotent = (
            chunked is None and self._content_length == 0 and (method in IDEMPOTENT_METHODS)
        )
        lines = self._lines
        buffering = chunked is not None or self._content_length > 0
        if buffering and not http10:
            lines = self._expect_continue(ex, lines)
        if self._conn_tokens:
            tokens = self._conn_tokens
            lines = [
                line + b"\r\n"
                for line in b"".join(lines).split(b"\r\n")
                if line and header_name(line) not in tokens
            ]
        end = b"\r\n" if self._xff_seen else self._xff_end
        if chunked is not None:
            end = b"transfer-encoding: %s\r\n%s" % (chunked, end)
        if websocket:
            end = b"connection: upgrade\r\nupgrade: %s\r\n%s" % (upgrade_to, end)
        head = b"".join((method, b" ", url, b" HTTP/1.1\r\n", *lines, end))
        if len(head) > self.proxy.max_header_bytes + 64:
            raise RequestRejected(431, "request header fields too large", "headers_too_large")
        ex.head = head
        self.proxy.ready(ex)
        if websocket:
            if buffering:
                raise RequestRejected(400, "a WebSocket handshake has no body", "websocket_body")
            ex.idempotent = False  # never replayed once sent: the replica may have acted
            self.upgrading = ex
            return  # routed by hold_for_answer, once httptools stops at the upgrade
        if buffering:
            ex.buffering = True  # dispatched once the body is read (or large)
        elif self.exchanges[0] is ex:
            self.proxy.dispatch(ex)

    def on_body(self, body: bytes) -> None:
        ex = self.parsing
        assert ex is not None
        self.body_bytes += len(body)
        if self._chunked_te is not None:
            if self.body_bytes > self.proxy.max_body_bytes:
                raise RequestRejected(413, "request body too large", "body_too_large")
            if body:
                self._send_body(ex, b"%x\r\n%s\r\n" % (len(body), body))
        else:
            self._send_body(ex, body)

    def on_message_complete(self) -> None:
        if self._declined:  # httptools skipped a declined upgrade's body: not complete yet
            return
        ex = self.parsing
        assert ex is not None
        self.parsing = None
        if self._timer is not None:
            self._disarm()
        if self._chunked_te is not None:
            self._send_body(ex, b"0\r\n\r\n")
        ex.request_done = True
        if ex.buffering:
            ex.buffering = False
            if ex.state is READY and self.exchanges[0] is ex:
                self.proxy.dispatch(ex)
        elif ex.state is DONE:
            self._exchange_done(ex)  # answered before its body had all arrived

    # -- request body ------------------------------------------------------------
    def _send_body(self, ex: Exchange, data: bytes) -> None:
        state = ex.state
        if state is SENT:
            conn = ex.upstream
            assert conn is not None
            conn.send(data)
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
        """Answer ``ex`` from the load balancer itself."""
        if self.proxy.draining:
            ex.keep_alive = False
        ex.status = status
        self.write(simple_response(status, message, close=not ex.keep_alive))
        self.response_done(ex)

    def response_done(self, ex: Exchange) -> None:
        """The response to ``ex`` is written; move on once its request is read too."""
        if ex.request_done or not ex.keep_alive:
            self._exchange_done(ex)
        # else: on_message_complete finishes it, discarding the rest of the body

    def abort_response(self, ex: Exchange) -> None:
        """The response broke mid-body: the only honest signal left is closing."""
        self.close()

    def _exchange_done(self, ex: Exchange) -> None:
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
                self._serve_local(nxt)
            elif nxt.state is READY and not nxt.buffering:
                self.proxy.dispatch(nxt)
        else:
            self.idle_since = self.proxy.now()

    def _serve_local(self, ex: Exchange) -> None:
        data = ex.local
        assert data is not None
        self.proxy.answered_locally(ex)
        self.write(data)
        self._exchange_done(ex)

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.proxy.clients.discard(self)  # no longer counts towards max_connections
            if self.transport is not None:
                self.transport.close()
