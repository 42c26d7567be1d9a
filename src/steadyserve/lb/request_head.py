"""What the load balancer makes of a request head: gathered, then judged, without a socket.

httptools hands a head over in pieces (``on_url``, ``on_header``): ``RequestHead``
gathers them (and refuses a bad Content-Length or version pin at once, as the
header arrives). When the head is complete, ``decide`` judges it: it either
rejects it (``Move.REJECT``, with the status, message and access-log ``reason``
in ``head.rejected``) or accepts it, writing the head to forward (request line
forced to HTTP/1.1, hop-by-hop headers and ``Expect`` dropped, X-Forwarded-For
appended, the upgrade headers put back on a WebSocket handshake) and the
request's facts (keep-alive, HTTP/1.0, HEAD, passthrough, idempotent, pin) into
the exchange, and returning what the connection does next: dispatch it, buffer
its body first, or route it as a WebSocket handshake.

The checks, in the order that decides which refusal a request with several
faults gets (the order the access log has always shown)::

    CONNECT                          501 connect_method
    Content-Length > max_body_bytes  413 body_too_large
    a version other than 1.0/1.1     505 http_version
    not exactly one Host (1.1)       400 bad_host
    a target that cannot normalise   400 bad_target
    a blocked path                   404 blocked_path
    no Bearer auth_key (when set)    401 unauthorized
    a forwarded head too large       431 headers_too_large
    a WebSocket handshake with body  400 websocket_body

(``head.continue_100`` is decided before the last two, so a client that asked
``Expect: 100-continue`` is told to go on before either can refuse it: as
before.)

Why this shape: the function is pure (no I/O, no clock, no connection: a head,
its parser's few answers and the rules in; a verdict out) so that every
decision can be tested without sockets (tests/lb/test_request_head.py), but it
runs on every request, so it allocates nothing it need not. ``RequestHead`` is
one flat object per connection, reset per request; the verdict is a member of a
small IntEnum, and the request's facts go straight into the exchange the proxy
reads (``RequestFacts``), so accepting a request costs no record beyond the
forwarded head's bytes. A rejection, the cold path, allocates its
``RequestRejected``. Most heads carry only Host and end-to-end headers: any
other header the head watches sets ``marked``, and only a marked head has its
rarer fields reset (``begin``) and checked (``decide``), so a plain GET costs
little more than the bytes it forwards (bench/RESULTS.md, per-request instructions).
"""

from __future__ import annotations

import hmac
from enum import IntEnum
from typing import Protocol

from steadyserve.lb.declined_upgrade import body_framing
from steadyserve.lb.http import (
    HOP_BY_HOP,
    PIN_HEADER,
    REQUEST_WATCHED_NAME_LENGTHS,
    codings,
    connection_tokens,
    header_name,
    is_version_pin,
)
from steadyserve.lb.target import BadTarget, is_blocked, is_plain, normalise
from steadyserve.lb.websocket import is_websocket_upgrade

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

BAD_PIN = (
    "X-Steady-Version must be a version number (1, 2, ...): digits only, "
    "no sign, space or leading zero"
)


class RequestRejected(Exception):
    """A request the load balancer answers itself and then closes the connection.
    Raised from a parser callback (or set in ``RequestHead.rejected``).
    ``reason``: a short stable word for the access log (docs/observability.md)."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


class Move(IntEnum):
    """What the connection does with a head ``decide`` judged. An IntEnum, compared
    with ``is``, as ``exchange.Phase`` is."""

    REJECT = 0  # answer ``head.rejected`` locally and close
    DISPATCH = 1  # no body: route it once it is first in line
    BUFFER = 2  # a body: read it (up to REQUEST_BUFFER_BYTES) before routing
    TUNNEL = 3  # a WebSocket handshake: routed once httptools stops at the upgrade


REJECT = Move.REJECT
DISPATCH = Move.DISPATCH
BUFFER = Move.BUFFER
TUNNEL = Move.TUNNEL


class Rules(Protocol):
    """What ``decide`` reads of the load balancer's settings (``Proxy`` has them)."""

    @property
    def max_body_bytes(self) -> int: ...
    @property
    def max_header_bytes(self) -> int: ...
    @property
    def blocked_paths(self) -> frozenset[bytes]: ...
    @property
    def websockets(self) -> object | None: ...  # None: upgrades are declined
    @property
    def auth(self) -> bytes | None: ...  # service.auth_key (None: no check)
    @property
    def idempotent_methods(self) -> frozenset[bytes]: ...  # lb/retry.py


class RequestFacts(Protocol):
    """Where ``decide`` writes an accepted request's facts (``Exchange`` is one)."""

    head: bytes
    keep_alive: bool
    http10: bool
    method_head: bool
    passthrough_ok: bool
    idempotent: bool
    pin: int | None


class RequestHead:
    """One connection's request head being gathered, and the verdict on it.
    ``begin`` resets it for each request; the peer's address stays."""

    __slots__ = (
        "chunked_te",
        "conn_tokens",
        "connection_seen",
        "content_length",
        "continue_100",
        "declined",
        "host_at",
        "hosts",
        "lines",
        "marked",
        "pin",
        "rejected",
        "upgrade",
        "upgrade_to",
        "url",
        "xff",
        "xff_end",
        "xff_seen",
    )

    def __init__(self, peer: bytes = b"") -> None:
        self.peer(peer)
        # Set by a declined upgrade's head: its body's framing (declined_upgrade.py).
        # Outlives the head: read when httptools stops at the upgrade.
        self.declined: bytes | None = None
        self.host_at = -1  # the Host value's index in ``lines``: read only when hosts
        # Set by ``reject`` and read only when ``decide`` has just returned REJECT.
        self.rejected: RequestRejected | None = None
        self.marked = True  # every field below is reset by the first begin
        self.begin()

    def peer(self, ip: bytes) -> None:
        """The client's address, appended to (or sent as) X-Forwarded-For."""
        self.xff = ip
        self.xff_end = b"x-forwarded-for: %s\r\n\r\n" % ip

    def begin(self) -> None:
        """Reset for the next request. Runs on every request, so only the fields
        every head writes are reset each time; the rest keep their defaults until
        a header outside the common case (Host and end-to-end headers) sets
        ``marked``, and only then are they reset: a plain GET pays three stores."""
        self.lines: list[bytes] = []  # name, b": ", value, b"\r\n" for each header
        self.url = b""
        self.hosts = 0
        if self.marked:
            self.marked = False
            self.chunked_te: bytes | None = None  # the Transfer-Encoding header
            self.content_length = 0
            self.conn_tokens: set[bytes] | None = None  # Connection options to drop
            self.connection_seen = False
            self.upgrade = False  # Connection: upgrade
            self.upgrade_to: bytes | None = None  # the Upgrade header (lb/websocket.py)
            self.xff_seen = False
            self.pin: int | None = None  # X-Steady-Version: only this version may answer
            self.continue_100 = False  # answer 100 Continue (if it is first in line)

    # -- httptools callbacks (the connection's parser calls these directly) --------
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) in REQUEST_WATCHED_NAME_LENGTHS:
            lname = name.lower()
            if lname in HOP_BY_HOP:
                self.marked = True
                if lname == b"transfer-encoding":
                    if self.chunked_te is not None:
                        # Two lines are one list (RFC 9110 5.3) that llhttp reads as
                        # such, while only one line is forwarded: a coding would be
                        # lost (gzip, then chunked). Refused, as h11 does.
                        raise RequestRejected(
                            400,
                            "malformed request: more than one Transfer-Encoding header",
                            "bad_transfer_encoding",
                        )
                    self.chunked_te = value
                elif lname == b"connection":
                    self.connection_seen = True
                    tokens = connection_tokens(value)
                    if b"upgrade" in tokens:
                        self.upgrade = True
                    tokens -= {b"close", b"keep-alive", b"upgrade"}
                    if tokens:
                        self.conn_tokens = (self.conn_tokens or set()) | tokens
                elif lname == b"upgrade":
                    self.upgrade_to = value
                return
            if lname == PIN_HEADER:  # pin to a version, never forwarded
                self.marked = True
                self.pin_header(value)
                return
            if lname == b"content-length":
                self.marked = True
                try:
                    self.content_length = int(value)
                except ValueError:
                    raise RequestRejected(
                        400, "malformed request: bad Content-Length", "bad_content_length"
                    ) from None
            elif lname == b"x-forwarded-for":
                self.marked = True
                self.xff_seen = True
                value = b"%s, %s" % (value, self.xff)
            elif lname == b"host":
                self.hosts += 1
                self.host_at = len(self.lines) + 2
        self.lines += (name, b": ", value, b"\r\n")

    def pin_header(self, value: bytes) -> None:
        """The client's X-Steady-Version (the preview port's head ignores it)."""
        if not is_version_pin(value):
            raise RequestRejected(400, BAD_PIN, "bad_version_pin")
        self.pin = int(value)

    def reject(self, status: int, message: str, reason: str) -> Move:
        self.rejected = RequestRejected(status, message, reason)
        return REJECT


def decide(
    head: RequestHead,
    facts: RequestFacts,
    method: bytes,
    version: str | None,
    keep_alive: bool,
    should_upgrade: bool,
    rules: Rules,
) -> Move:
    """Judge a complete head (see the module's docstring).

    ``version``: httptools' ``get_http_version()``, or None when it was not asked:
    a request kept alive without a Connection header is HTTP/1.1 for every
    decision here (httptools parses only 0.9, 1.0, 1.1 and 2.0, and keeps only 1.1
    alive without one), and asking formats a str (a tenth of a microsecond a request).
    ``should_upgrade``: httptools' ``should_upgrade()``, needed only when
    ``head.upgrade``. ``facts``: the exchange, written only on acceptance.
    """
    if method == b"CONNECT":
        return head.reject(
            501, "CONNECT is not supported: this is not a forward proxy", "connect_method"
        )
    # Unmarked (the common head: Host and end-to-end headers only), every field
    # ``begin`` resets only when marked is at its default: no body, no upgrade, no
    # Connection options, no X-Forwarded-For of the client's. Its checks are skipped.
    marked = head.marked
    buffering = websocket = False
    if marked:
        content_length = head.content_length
        chunked = head.chunked_te
        if head.upgrade:
            websocket = rules.websockets is not None and is_websocket_upgrade(
                method, head.upgrade_to, version == "1.0"
            )
            if not websocket and should_upgrade:
                # Declined (h2c and the like): served as HTTP/1.1, as nginx does.
                head.declined = body_framing(content_length, chunked is not None)
        if content_length > rules.max_body_bytes:
            return head.reject(413, "request body too large", "body_too_large")
    if version is None:
        http10 = False
    else:
        if version not in ("1.1", "1.0"):
            return head.reject(505, f"HTTP/{version} is not supported here", "http_version")
        http10 = version == "1.0"
    hosts = head.hosts
    lines = head.lines
    if hosts != 1:
        if hosts or not http10:
            return head.reject(400, "a request needs exactly one Host header", "bad_host")
        # HTTP/1.0 may omit Host, but the head goes on as HTTP/1.1, which must carry
        # one (RFC 9112 3.2; a replica reading it strictly, h11 for one, answers 400
        # without): empty, as for a target without an authority, or the authority
        # of an absolute-form target (below).
        lines = [b"host", b": ", b"", b"\r\n", *lines]
        head.host_at = 2
        hosts = 1
    url = head.url
    if not is_plain(url):
        try:
            url, authority = normalise(url, method)
        except BadTarget as exc:
            return head.reject(400, f"bad request target: {exc}", "bad_target")
        if authority is not None and hosts:
            # Absolute-form: its authority is the host (RFC 9112 3.2.2).
            lines[head.host_at] = authority
    blocked = rules.blocked_paths
    if blocked and is_blocked(url, blocked):
        return head.reject(404, "not found", "blocked_path")
    auth = rules.auth
    if auth is not None and not _authorized(lines, auth):
        return head.reject(401, "unauthorized: send Authorization: Bearer KEY", "unauthorized")
    if marked:
        buffering = chunked is not None or content_length > 0
        if chunked is not None and http10:
            # RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty
            # framing (a 1.0 peer may have read its body another way): close after it.
            keep_alive = False
        if buffering and not http10:
            lines = _without_expect(head, lines)
        tokens = head.conn_tokens
        if tokens:
            lines = [
                line + b"\r\n"
                for line in b"".join(lines).split(b"\r\n")
                if line and header_name(line) not in tokens
            ]
        end = b"\r\n" if head.xff_seen else head.xff_end
        if chunked is not None:
            end = b"transfer-encoding: %s\r\n%s" % (_codings(chunked), end)
        if websocket:
            end = b"connection: upgrade\r\nupgrade: %s\r\n%s" % (head.upgrade_to, end)
    else:
        end = head.xff_end
    forward = b"".join((method, b" ", url, b" HTTP/1.1\r\n", *lines, end))
    if len(forward) > rules.max_header_bytes + 64:
        return head.reject(431, "request header fields too large", "headers_too_large")
    if websocket and buffering:
        return head.reject(400, "a WebSocket handshake has no body", "websocket_body")
    facts.head = forward
    facts.keep_alive = keep_alive
    facts.http10 = http10
    facts.method_head = head_request = method == b"HEAD"
    # HEAD: httptools would wait for the body the head announces; rebuild instead.
    facts.passthrough_ok = keep_alive and not http10 and not head_request
    # Never replay a handshake once sent: the replica may have acted on it. A body
    # is replayed from what the load balancer holds of it (lb/retry.py).
    facts.idempotent = not websocket and method in rules.idempotent_methods
    facts.pin = head.pin
    if websocket:
        return TUNNEL
    return BUFFER if buffering else DISPATCH


def _authorized(lines: list[bytes], key: bytes) -> bool:
    """SkyServe's ``auth_key`` check: the first Authorization header is ``Bearer KEY``
    (the scheme in any case), compared in constant time. Read only when a key is set."""
    for i in range(0, len(lines), 4):
        name = lines[i]
        if len(name) == 13 and name.lower() == b"authorization":
            scheme, _, token = lines[i + 2].strip().partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key)
    return False


def _codings(value: bytes) -> bytes:
    """The Transfer-Encoding forwarded: the client's codings without empty list
    elements or the whitespace around them. llhttp reads ``, chunked`` as chunked
    (RFC 9110 5.6.1: empty elements are ignored); a replica that does not, and so
    finds no framing, would read the chunks that follow as its next request."""
    if value == b"chunked":
        return value
    return b", ".join(codings(value))


def _without_expect(head: RequestHead, lines: list[bytes]) -> list[bytes]:
    """The load balancer reads the body before choosing a replica, so it answers
    ``Expect: 100-continue`` itself (as nginx does) and does not forward it."""
    for i in range(0, len(lines), 4):
        name = lines[i]
        if len(name) == 6 and name.lower() == b"expect":
            if lines[i + 2].strip().lower() == b"100-continue":
                head.continue_100 = True
            return lines[:i] + lines[i + 4 :]
    return lines
