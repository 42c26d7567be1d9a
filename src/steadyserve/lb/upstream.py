"""A keep-alive connection to one replica: sends requests, streams responses back.

Responses are parsed with httptools to find where they end, and forwarded in the
framing mode chosen when the response head is complete (lb/framing.py: the modes
and their table of what each does on body bytes, at the end and at a close):

* passthrough (the common case): the head carries nothing connection-specific
  (no hop-by-hop header besides ``Transfer-Encoding: chunked`` or
  ``Connection: keep-alive``), the body is framed by Content-Length or chunking,
  and the client speaks HTTP/1.1 with keep-alive. The replica's bytes then go to
  the client exactly as they arrived: no head rebuilt, no body copied or
  re-chunked, one write per read. Streams (SSE, token streaming) flow through
  unchanged as soon as each piece arrives.
* rebuilt: anything else (HEAD, 1xx, until-close bodies, HTTP/1.0 or closing
  clients, hop-by-hop headers): the head rebuilt without hop-by-hop headers, the
  body re-framed (re-chunked for HTTP/1.1, until-close for 1.0).

A ``101 Switching Protocols`` is accepted only as the answer to the WebSocket
handshake its client connection is waiting on (lb/websocket.py): the connection
then parses no more and its socket goes to the tunnel. Bytes past a response's end
are lb/overrun.py's; lb/retry.py reads ``idle_since``, ``unsent``, ``answered``.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from time import perf_counter
from typing import TYPE_CHECKING, cast

import httptools

from steadyserve.lb.framing import (
    BODY_CHUNKED,
    BODY_RAW,
    PASSTHROUGH,
    PASSTHROUGH_RULE,
    PENDING,
    PENDING_RULE,
    RULES,
    Framing,
    choose,
    head_end,
)
from steadyserve.lb.http import (
    HOP_BY_HOP,
    STATUS_LINES,
    WATCHED_NAME_LENGTHS,
    connection_tokens,
    header_name,
    set_nodelay,
)
from steadyserve.lb.overrun import overrun
from steadyserve.lb.pool import announced, closed_idle
from steadyserve.lb.request_id import stamped

if TYPE_CHECKING:
    from steadyserve.lb.balancer import ReplicaState
    from steadyserve.lb.exchange import Exchange
    from steadyserve.lb.proxy import Proxy

# A larger response head is a 502 and a log line (nginx: proxy_buffer_size). A
# response's bytes are kept while smaller, so that should the replica send bytes past
# its end, only the response is forwarded (lb/overrun.py).
MAX_RESPONSE_HEAD_BYTES = MAX_HELD_BYTES = MAX_SEEN_BYTES = 64 * 1024


class UpstreamProtocolError(Exception):
    """The replica sent something the proxy cannot forward."""


class UpstreamConnection(asyncio.Protocol):
    """One TCP connection to a replica, pooled between requests."""

    __slots__ = (
        "_clean",
        "_conn_tokens",
        "_extra",
        "_has_length",
        "_interim",
        "_lines",
        "_out",
        "_switching",
        "_te",
        "_upgrade_to",
        "closed",
        "complete",
        "exchange",
        "framing",
        "head_sent",
        "held",
        "held_size",
        "idle_since",
        "in_pool",
        "keep_alive",
        "parser",
        "poller",
        "proxy",
        "read_paused",
        "replica",
        "rule",
        "seen",
        "seen_size",
        "status",
        "transport",
        "unsent",
        "wrote",
    )

    def __init__(self, proxy: Proxy, replica: ReplicaState) -> None:
        self.proxy = proxy
        self.replica = replica
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: Exchange | None = None
        self.closed = False
        self.in_pool = False
        self.read_paused = False
        self.idle_since = 0.0
        self.unsent = False  # the last request's write failed: the replica read none of it
        self.poller: select.poll | None = None  # asked by lb/pool.py before reuse
        self._out: list[bytes] = []
        self._switching = False  # a 101 to a WebSocket handshake is being parsed
        self._upgrade_to: bytes | None = None  # the response's Upgrade header
        self._begin()

    def _begin(self) -> None:
        """Reset the per-response state."""
        self._lines: list[bytes] = []
        self.held: list[bytes] = []
        self.held_size = 0
        self._te: bytes | None = None
        self._has_length = False
        self._clean = True
        self._conn_tokens: set[bytes] | None = None
        self._interim = False
        self.framing = PENDING
        self.rule = PENDING_RULE
        self.head_sent = False
        self.complete = False
        self.keep_alive = False
        self.status = 0
        self.wrote = False  # has any byte of this response gone to the client?
        self._extra = False  # bytes arrived past the end of the response
        self.seen: list[bytes] | None = []
        self.seen_size = 0

    # -- asyncio.Protocol ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        set_nodelay(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Asked before the connection is used again (lb/pool.py): poll(0) on
            # this one descriptor is a single syscall, no exception raised.
            self.poller = poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            # Nothing was asked: a replica talking out of turn cannot be trusted.
            self.close()
            return
        seen = self.seen
        if seen is not None:
            seen.append(data)
            self.seen_size += len(data)
            if self.seen_size > MAX_SEEN_BYTES:
                self.seen = None
        if self.framing is PASSTHROUGH:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError as exc:
                self._broken(exchange, exc, data)
                return
            except httptools.HttpParserUpgrade as exc:
                self._upgraded(exchange, data, int(exc.args[0]))
                return
            if self._extra:
                overrun(self, exchange, data)
                return
            self.wrote = True
            exchange.client.write(data)
            if self.complete:
                self.finish(exchange)
            return
        out = self._out = []
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._broken(exchange, exc, data)
            return
        except httptools.HttpParserUpgrade as exc:
            self._upgraded(exchange, data, int(exc.args[0]))
            return
        if self.framing is PASSTHROUGH:
            if self._extra:
                overrun(self, exchange, data)
                return
            held = self.held
            # The access log's X-Request-Id is asked first: off, the check ends here.
            if exchange.request_id is not None and not self.wrote:
                # This read holds (the end of) the head: stamp it.
                self.wrote = True
                self.held = []
                exchange.client.write(stamped(b"".join([*held, data]), exchange.request_id))
            else:
                self.wrote = True
                if held:
                    held.append(data)
                    exchange.client.write_many(held)
                    self.held = []
                else:
                    exchange.client.write(data)
        else:
            if out:
                self.wrote = True
                exchange.client.write_many(out)
            if not self.head_sent:
                # Head incomplete: keep the bytes in case it turns out passthrough.
                self.held.append(data)
                self.held_size += len(data)
                if self.held_size > MAX_HELD_BYTES:
                    self.proxy.upstream_failed(exchange, self, "response head larger than 64 KiB")
                    return
        if self.complete:
            if self._extra:
                self.keep_alive = False  # never reuse a connection with leftover bytes
            self.finish(exchange)

    def _upgraded(self, exchange: Exchange, data: bytes, end: int) -> None:
        """httptools stopped at the end of a 101 head: hand the socket over to the
        WebSocket tunnel, or fail (a 101 nobody asked for is never forwarded)."""
        transport = self.transport
        if not self._switching or transport is None:
            self.proxy.upstream_failed(exchange, self, "a protocol switch nobody asked for")
            return
        head = b"".join(
            (
                STATUS_LINES[101],
                *self._filtered(self._lines),
                b"connection: upgrade\r\nupgrade: %s\r\n\r\n" % (self._upgrade_to or b"websocket"),
            )
        )
        self.exchange = None
        self.closed = True  # never pooled again: the socket is the tunnel's
        transport.pause_reading()  # until the tunnel takes over
        self.proxy.switched(exchange, transport, head, data[end:])

    def _broken(
        self, exchange: Exchange, exc: httptools.HttpParserError, data: bytes = b""
    ) -> None:
        reason = exc.__context__ if exc.__context__ is not None else exc
        if self.complete:
            # A whole response followed by garbage: deliver it, drop the connection.
            if self.framing is PASSTHROUGH:
                overrun(self, exchange, data)
                return
            if self._out:
                exchange.client.write_many(self._out)
            self.keep_alive = False
            self.finish(exchange)
            return
        if self.wrote and self.framing is not PASSTHROUGH and self._out:
            exchange.client.write_many(self._out)
        self.proxy.upstream_failed(exchange, self, f"bad response from replica: {reason}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.in_pool:  # the replica closed it while idle (lb/pool.py learns from it)
            self.in_pool = False
            with contextlib.suppress(ValueError):
                self.replica.idle.remove(self)
            closed_idle(self.replica, self.proxy.now() - self.idle_since)
        exchange = self.exchange
        if exchange is None:
            return
        rule = self.rule
        if rule.ends_at_close and self.head_sent and not self.complete:
            # The replica framed its body by closing: this is the body's end.
            if rule.at_close:
                exchange.client.write(rule.at_close)
            self.keep_alive = False
            self.finish(exchange)
            return
        self.proxy.upstream_failed(exchange, self, f"replica connection lost: {exc!r}")

    def pause_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client.pause_reading_for_upstream()

    def resume_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client.resume_reading_for_upstream()

    # -- used by the proxy ----------------------------------------------------------
    def start(self, exchange: Exchange, head: bytes, body: list[bytes] | None) -> None:
        """Send ``exchange``'s request (head, buffered body); ``unsent``: it failed."""
        self.exchange = exchange
        self.in_pool = False
        if self.complete:
            self._begin()
        transport = self.transport
        if transport is None:
            raise RuntimeError("start() before connection_made()")
        try:
            if body:
                transport.writelines([head, *body])
            else:
                transport.write(head)
        except RuntimeError:  # uvloop: closed by the replica, connection_lost to come
            self.unsent = True
            return
        # A write that fails closes the transport at once: nothing reached the replica.
        self.unsent = transport.is_closing()
        if exchange.client.write_paused:
            self.pause_reading()

    def send(self, data: bytes) -> None:
        """More request body; the transport buffers it and flow control applies."""
        transport = self.transport
        if transport is not None and not self.closed:
            transport.write(data)

    def quiet(self) -> bool:
        """Is there nothing to read? A pooled connection that is readable is at
        EOF, reset, or holds stray bytes: either way not to be used again."""
        poller = self.poller
        return poller is None or not poller.poll(0)

    @property
    def answered(self) -> bool:
        """Has any byte of the current response arrived (forwarded or not)?"""
        return self.seen is None or self.seen_size > 0

    def pause_reading(self) -> None:
        if not self.read_paused and not self.closed and self.transport is not None:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused and not self.closed and self.transport is not None:
            self.read_paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        """Close without returning to the pool (the exchange, if any, is forgotten)."""
        self.exchange = None
        self.in_pool = False  # closed by the load balancer: nothing for lb/pool.py to learn
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def finish(self, exchange: Exchange) -> None:
        self.exchange = None
        rule = self.rule
        if rule.complete_at_head:
            # httptools cannot be told that a HEAD response has no body: start afresh.
            self.parser = httptools.HttpResponseParser(self)
        if self.read_paused:
            self.resume_reading()
        self.proxy.response_complete(exchange, self, self.keep_alive and rule.reusable)

    # -- httptools callbacks ----------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:
            self._extra = True  # a second message where one response was asked for

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) in WATCHED_NAME_LENGTHS:
            lname = name.lower()
            if lname in HOP_BY_HOP:
                if lname == b"transfer-encoding":
                    self._te = value
                    if value.lower() != b"chunked":
                        self._clean = False
                elif lname == b"connection":
                    tokens = connection_tokens(value)
                    if tokens != {b"keep-alive"}:
                        self._clean = False
                    tokens -= {b"close", b"keep-alive"}
                    if tokens:
                        self._conn_tokens = (self._conn_tokens or set()) | tokens
                else:
                    if lname == b"upgrade":
                        self._upgrade_to = value
                    elif lname == b"keep-alive":
                        announced(self.replica, value)
                    self._clean = False
                return
            if lname == b"content-length":
                self._has_length = True
        self._lines += (name, b": ", value, b"\r\n")

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        if self.complete:
            raise UpstreamProtocolError("a second response to one request")
        # What was read of this response bounds its head: only a large read is summed.
        if self.seen_size > MAX_RESPONSE_HEAD_BYTES < sum(map(len, self._lines)):
            raise UpstreamProtocolError("response head larger than 64 KiB")
        parser = self.parser
        status = parser.get_status_code()
        self.status = status
        if status < 200:
            self._interim_head(exchange, status)
            return
        if (
            self._clean
            and exchange.passthrough_ok
            and exchange.request_done
            and not self._interim
            and (self._has_length or self._te is not None or status == 204 or status == 304)
            and not self.proxy.draining
        ):
            # choose()'s first case, tested here first: on every response, its
            # ten-argument call costs more than the test (tests/lb/test_framing.py
            # holds the two to the same answer).
            self.framing = PASSTHROUGH
            self.rule = PASSTHROUGH_RULE
            self.head_sent = True
            exchange.response_started = True
            return
        framing = choose(
            status,
            self._clean,
            self._has_length,
            self._te,
            self._interim,
            exchange.passthrough_ok,
            exchange.request_done,
            self.proxy.draining,
            exchange.method_head,
            exchange.http10,
        )
        self.framing = framing
        self._rebuild_head(exchange, status, framing)

    def _interim_head(self, exchange: Exchange, status: int) -> None:
        if status == 101:
            if exchange.client.upgrading is not exchange:
                raise UpstreamProtocolError("101 to a request that asked for no WebSocket")
            self._switching = True  # data_received hands over at HttpParserUpgrade
            return
        lines = self._lines
        self._out.append(b"".join((STATUS_LINES[status], *self._filtered(lines), b"\r\n")))
        self._lines = []
        self._interim = True

    def _filtered(self, lines: list[bytes]) -> list[bytes]:
        tokens = self._conn_tokens
        if not tokens:
            return lines
        joined = b"".join(lines).split(b"\r\n")
        return [line + b"\r\n" for line in joined if line and header_name(line) not in tokens]

    def _rebuild_head(self, exchange: Exchange, status: int, mode: Framing) -> None:
        self.rule = rule = RULES[mode]
        close = (
            not exchange.keep_alive
            or not exchange.request_done
            or self.proxy.draining
            or rule.closes_client
        )
        if rule.complete_at_head:
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()
        if close:
            exchange.keep_alive = False
        framing = head_end(rule, self._te, exchange.request_id, close, exchange.http10)
        self._out.append(
            b"".join((STATUS_LINES[status], *self._filtered(self._lines), framing, b"\r\n"))
        )
        self.head_sent = True
        exchange.response_started = True

    def on_body(self, body: bytes) -> None:
        exchange = self.exchange  # set: httptools is fed only while a request is out
        if not exchange.first_byte:  # type: ignore[union-attr]
            exchange.first_byte = perf_counter()  # type: ignore[union-attr]  # TTFB
        mode = self.rule.body
        if mode == BODY_RAW:
            self._out.append(body)
        elif mode == BODY_CHUNKED and body:
            self._out += (b"%x\r\n" % len(body), body, b"\r\n")

    def on_message_complete(self) -> None:
        if self.complete:
            return  # a HEAD response already completed at its headers
        if not self.head_sent:
            return  # the end of a 1xx interim response
        at_end = self.rule.at_end
        if at_end:
            self._out.append(at_end)
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True
