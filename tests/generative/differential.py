"""The load balancer's reading of a connection's bytes next to h11's.

``lb_reading`` drives the real client connection (lb/downstream.py, through
tests/lb/_sockless.py's rig: no socket) with the bytes, answers each request it
forwards from the replica side, and reads what it forwarded with h11 as a replica
would; ``h11_reading`` is h11's own reading of the same bytes. ``disagreement``
compares the two and names what differs, allowing only what the request's quirks
explain (tests/generative/heads.py). Shared by the bounded test and the long run.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import h11

from steadyserve.lb.http import HOP_BY_HOP
from tests.generative.heads import LIMIT, QUIRKS, Request
from tests.lb._sockless import Rig

# Headers the load balancer adds, drops or rewrites on purpose (docs/load-balancer.md).
_NOT_COMPARED = HOP_BY_HOP | {b"x-forwarded-for"}
CHUNKED = b"transfer-encoding: chunked"
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


@dataclass
class Seen:
    """One request as a parser read it."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""
    version: bytes = b"1.1"


@dataclass
class Reading:
    """What one side made of the bytes: the requests it served, in order, and
    whether it refused what followed them (with the reason)."""

    served: list[Seen] = field(default_factory=list)
    refused: str | None = None
    codings: list[bytes] = field(default_factory=list)  # Transfer-Encoding lines forwarded
    closed: bool = False  # it would read no further request on this connection


def h11_reading(raw: bytes) -> Reading:
    """h11 as a server reading ``raw``, answering each request with a 200."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=LIMIT)
    conn.receive_data(raw)
    conn.receive_data(b"")  # the client has sent everything
    out = Reading()
    current: Seen | None = None
    try:
        for _ in range(64):
            event = conn.next_event()
            if isinstance(event, h11.Request):
                current = Seen(
                    event.method, event.target, list(event.headers), version=event.http_version
                )
            elif isinstance(event, h11.Data):
                assert current is not None
                current.body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                assert current is not None
                out.served.append(current)
                current = None
                conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                conn.send(h11.EndOfMessage())
                if conn.our_state is h11.MUST_CLOSE:
                    out.closed = True
                    break
                conn.start_next_cycle()
            else:  # NEED_DATA, PAUSED, ConnectionClosed: nothing more to read
                break
    except h11.RemoteProtocolError as exc:
        out.refused = str(exc)
    return out


def _upstream_reading(conn: h11.Connection, data: bytes, into: list[Seen]) -> bool:
    """Feed the forwarded bytes to a replica-side h11; True when a request ended
    (the caller answers it). Raises AssertionError on bytes h11 cannot read: the
    load balancer must never forward an ambiguous request."""
    conn.receive_data(data)
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise AssertionError(f"the load balancer forwarded bytes h11 refuses: {exc}") from exc
        if isinstance(event, h11.Request):
            into.append(Seen(event.method, event.target, list(event.headers)))
        elif isinstance(event, h11.Data):
            into[-1].body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
            conn.send(h11.EndOfMessage())
            conn.start_next_cycle()
            return True
        else:
            return False


def lb_reading(loop: asyncio.AbstractEventLoop, raw: bytes) -> Reading:
    """The load balancer's client connection reading ``raw``; each request it
    forwards is read by h11 as the replica, and answered, so the next is sent.
    (Codings before chunked, which the load balancer forwards for the replica to
    decode, are shown to h11 as plain chunked: h11 implements no other coding,
    and what is checked is the framing.)"""
    rig = Rig(loop, max_header_bytes=LIMIT)
    out = Reading()
    upstream = h11.Connection(h11.SERVER)
    sent = 0
    try:
        rig.client.data_received(raw)
        for _ in range(16):
            data = rig.upstream_transport.bytes()
            fresh, sent = data[sent:], len(data)
            # One request a pass (the next is sent once this one is answered): its
            # head is up to the first empty line; a body's bytes are not a header.
            head, blank, body = fresh.partition(b"\r\n\r\n")
            out.codings += re.findall(rb"(?im)^transfer-encoding: ([^\r\n]*)\r?$", head)
            head = head.replace(b"transfer-encoding: gzip, chunked", CHUNKED)
            fresh = head + blank + body
            if not fresh or not _upstream_reading(upstream, fresh, out.served):
                break
            rig.upstream.data_received(OK)
        got = rig.client_transport.bytes()
        answers = got.count(b"HTTP/1.1 ")
        if answers > len(out.served):  # its own answer: a refusal
            out.refused = got[got.rfind(b"HTTP/1.1 ") :].split(b"\r\n", 1)[0].decode()
        out.closed = rig.client_transport.closed
    finally:
        rig.close()
    return out


def _compared(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(n.lower(), v) for n, v in headers if n.lower() not in _NOT_COMPARED]


def _forwarded(seen: Seen) -> list[tuple[bytes, bytes]]:
    """The end-to-end headers a proxy forwards of what h11 read: without the fields
    Connection names (RFC 9110 7.6.1), and without Expect when a body is announced
    (the load balancer reads it first and answers 100-continue itself:
    docs/load-balancer.md)."""
    named = {
        t.strip().lower()
        for n, v in seen.headers
        if n.lower() == b"connection"
        for t in v.split(b",")
    }
    framed = any(
        n.lower() == b"transfer-encoding" or (n.lower() == b"content-length" and v.strip(b"0"))
        for n, v in seen.headers
    )
    return [
        (n, v)
        for n, v in _compared(seen.headers)
        if n not in named and not (n == b"expect" and framed and seen.version == b"1.1")
    ]


def disagreement(req: list[Request], lb: Reading, ref: Reading) -> str | None:
    """What differs between the two readings that the requests' quirks do not
    explain (None: nothing)."""
    kinds = {QUIRKS[q].kind for r in req for q in r.quirks}
    n = min(len(lb.served), len(ref.served))
    for i in range(n):
        a, b = lb.served[i], ref.served[i]
        target, authority = b.target, None
        if target.startswith(b"http://"):  # absolute-form: its authority is the Host
            authority, _, path = target[7:].partition(b"/")
            # Normalised, it loses any fragment (tests/lb/test_blocked_readings.py).
            target = b"/" + path.partition(b"#")[0]
        if (a.method, a.target) != (b.method, target):
            got_line, want_line = (a.method, a.target), (b.method, target)
            return f"request {i}: forwarded {got_line!r}, h11 read {want_line!r}"
        want = _forwarded(b)
        got = _compared(a.headers)
        if not any(n == b"host" for n, _ in want):
            # HTTP/1.0 without Host: forwarded as HTTP/1.1, which needs one (empty).
            want = [(b"host", b""), *want]
        if authority is not None:
            want = [(n, authority if n == b"host" else v) for n, v in want]
        if got != want:
            return f"request {i}: forwarded headers {got!r}, h11 read {want!r}"
        if a.body != b.body:
            return f"request {i}: forwarded body {a.body!r}, h11 read {b.body!r}"
    if len(lb.served) > len(ref.served):
        if ref.refused is not None and "LAXER" not in kinds:
            return f"served request {n} that h11 refuses ({ref.refused})"
        if ref.refused is None and ref.closed:
            # h11 closes after an HTTP/1.0 request; the load balancer keeps a 1.0
            # client's connection when it asks (Connection: keep-alive), unless the
            # framing was faulty (checked in the test itself).
            wire: list[Request | None] = []  # a body past its length is one more request
            for r in req:
                wire += [r, None] if "body_past_length" in r.quirks else [r]
            prior = wire[n - 1] if 0 < n <= len(wire) else None
            if prior is None or not (prior.version == b"1.0" and prior.keep_alive):
                return f"served request {n} after h11 closed the connection"
    if len(lb.served) < len(ref.served) and "STRICTER" not in kinds:
        return f"refused request {len(lb.served)} ({lb.refused}) that h11 serves"
    return None
