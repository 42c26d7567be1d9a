"""The limits a client connection enforces on its client: the head and body
timeouts, the send timeout, which connections to shed at ``max_connections``,
and the local answer that refuses a request and closes (408, 413, 431, 400 ...).
Plain functions of a :class:`~steadyserve.lb.downstream.ClientConnection`, kept
apart from the per-request parsing path, which never runs them: the connection
owns its state (timers, pause bits), these read and write it through its typed
attributes.

A refused request is logged (when the access log is on) with a ``reason`` and
what was received of its request line: the method and target, each cut to a
bounded length (the access log escapes them)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from steadyserve.lb.exchange import DONE, ROUTED, Exchange
from steadyserve.lb.local_answer import answer, target_of
from steadyserve.wire.counts import CLIENT_ABORTED

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


def connection_cap(max_connections: int, fd_cap: int | None) -> int:
    """``max_connections``, lowered to what the file-descriptor limit allows."""
    if fd_cap is not None and max_connections > fd_cap:
        log.warning(
            "max_connections %d lowered to %d: the file-descriptor limit allows no more",
            max_connections,
            fd_cap,
        )
        return fd_cap
    return max_connections


def make_room(proxy: Proxy) -> bool:
    """At ``max_connections``: close the connections that hold no request, idle
    ones first, oldest first (a batch, so a flood of connects costs one scan per
    batch); False when every connection is busy with a request."""
    victims = idle_victims(proxy.clients, max(1, proxy.max_connections // 100))
    if not victims:
        return False
    log.warning(
        "%d client connections (max_connections): closing the %d oldest without a request",
        len(proxy.clients),
        len(victims),
    )
    for client in victims:
        client.close()
    return True


def _first(item: tuple[float, ClientConnection]) -> float:
    return item[0]


def received_line(data: bytes) -> bytes:
    """The start of a request line that did not parse, bounded: ``METHOD TARGET``."""
    line = data.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
    method, _, rest = line.partition(b" ")
    return method[:MAX_LOGGED_METHOD] + b" " + rest.split(b" ", 1)[0][:MAX_LOGGED_TARGET]


# -- the head and body timeouts --------------------------------------------------
def arm(conn: ClientConnection, seconds: float) -> None:
    """One timer per phase (head, body), armed only when a phase spans reads."""
    conn.timer_mark = conn.body_bytes
    conn.timer = conn.proxy.loop.call_later(seconds, on_timer, conn)


def disarm(conn: ClientConnection) -> None:
    timer = conn.timer
    if timer is not None:
        conn.timer = None
        timer.cancel()


def on_timer(conn: ClientConnection) -> None:
    conn.timer = None
    if conn.closing:
        return
    limits = conn.proxy.limits
    if conn.read_paused & ~PAUSE_BROKEN:
        # Not reading because of the proxy (backpressure, pipelining): not the
        # client's delay.
        arm(conn, limits.body_timeout_s if conn.parsing else limits.header_timeout_s)
        return
    if conn.in_head:
        reject(conn, 408, "request header timeout", "header_timeout")
    elif conn.parsing is not None:
        if conn.body_bytes > conn.timer_mark:
            arm(conn, limits.body_timeout_s)  # progress since the last check
        else:
            reject(conn, 408, "request body timeout", "body_timeout")
    elif not conn.exchanges:
        conn.close()  # connected, never sent a byte


# -- the send timeout ---------------------------------------------------------------
def writing_paused(conn: ClientConnection) -> None:
    """The client stopped reading: start its send timeout, and stop reading the
    replica whose response it is not taking."""
    conn.write_paused = True
    if conn.send_timer is None and not conn.closing:
        conn.send_timer = conn.proxy.loop.call_later(conn.proxy.send_timeout, send_timed_out, conn)
    if conn.exchanges:
        upstream = conn.exchanges[0].upstream
        if upstream is not None:
            upstream.pause_reading()


def writing_resumed(conn: ClientConnection) -> None:
    conn.write_paused = False
    if conn.send_timer is not None:
        conn.send_timer.cancel()
        conn.send_timer = None
    if conn.exchanges:
        upstream = conn.exchanges[0].upstream
        if upstream is not None:
            upstream.resume_reading()


def send_timed_out(conn: ClientConnection) -> None:
    """The client read nothing of its response for send_timeout: let go of it
    (and of the replica connection its backpressure was holding)."""
    conn.send_timer = None
    if conn.write_paused and not conn.closing:
        log.warning("client stopped reading its response; closing the connection")
        conn.close()
        if conn.transport is not None:
            conn.transport.abort()  # close() would wait for the unread bytes to drain


def stop_timers(conn: ClientConnection) -> None:
    for timer in (conn.timer, conn.send_timer):
        if timer is not None:
            timer.cancel()
    conn.timer = conn.send_timer = None


# -- refusals -----------------------------------------------------------------------
def received(conn: ClientConnection) -> bytes:
    """``METHOD TARGET`` of the request being parsed, as received and bounded
    (b"" before its target began: httptools' method is only valid by then)."""
    url = conn.head.url
    if not url:
        return b""
    method: bytes = conn.parser.get_method()
    return method[:MAX_LOGGED_METHOD] + b" " + url[:MAX_LOGGED_TARGET]


def reject(
    conn: ClientConnection,
    status: int,
    message: str,
    reason: str,
    line: bytes | None = None,
) -> None:
    """Answer a request the proxy will not forward, then close the connection.
    ``line``: what to log of its request line (default: what was parsed)."""
    conn.pause_reading(PAUSE_BROKEN)
    ex = conn.parsing
    conn.parsing = None
    exchanges = conn.exchanges
    if (
        ex is not None
        and exchanges
        and exchanges[0] is ex
        and (ex.state in ROUTED or ex.state is DONE)
    ):
        # Already routed or answered: stop the replica side first.
        ex.reason = reason
        started = ex.response_started
        conn.proxy.abort(ex)
        if started:
            ex.outcome = CLIENT_ABORTED  # broke the protocol mid-response: its response is cut
            conn.close()
        else:
            ex.keep_alive = False
            ex.response_started = True
            ex.status = status
            conn.write(answer(status, message, reason, target_of(ex.head), True, ex.method_head))
            conn.exchange_done(ex)
        return
    if ex is not None and exchanges and exchanges[-1] is ex:
        exchanges.pop()
    error = Exchange(conn)
    error.reason = reason
    error.received = received(conn) if line is None else line
    error.local = answer(
        status,
        message,
        reason,
        target_of(error.received),
        close=True,
        head=error.received.startswith(b"HEAD "),
    )
    error.status = status
    error.keep_alive = False
    error.request_done = True
    conn.proxy.ready(error)
    exchanges.append(error)
    if exchanges[0] is error:
        conn.serve_local(error)


def broken(conn: ClientConnection, err: BaseException | None) -> None:
    """A failure in the load balancer's own handling of ``conn`` (a bug, or an input
    no check foresaw): the connection is never left hanging. Its only request, when
    no response to it is under way, is answered 500 and counted (reason
    ``internal_error``); the connection is closed either way, which frees every
    slot its requests held."""
    log.error("internal error while proxying; the connection is closed", exc_info=err)
    conn.pause_reading(PAUSE_BROKEN)
    conn.parsing = None
    exchanges = conn.exchanges
    ex = exchanges[0] if len(exchanges) == 1 else None
    if ex is not None and not ex.response_started and not conn.closing:
        try:
            conn.proxy.abort(ex)
            ex.reason = "internal_error"
            ex.keep_alive = False
            ex.response_started = True
            ex.status = 500
            error = "internal load balancer error"
            conn.write(answer(500, error, ex.reason, target_of(ex.head), True, ex.method_head))
            conn.exchange_done(ex)  # counted, then closed (not keep-alive)
        except Exception:
            log.exception("could not answer the broken request")
    conn.close()
