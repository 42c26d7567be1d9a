"""How a replica's response is framed on its way to the client: one mode per response.

When a response head is complete (upstream.py), ``choose`` picks its
``Framing`` from the head and the request, and ``RULES`` says what that mode
does with the rest: how a body byte goes out, what is written when httptools
finds the end, whether the replica closing the connection is the end (or a
failure), whether the client connection closes after, and whether the replica
connection may be pooled again. upstream.py reads the rule; it decides nothing
about framing itself, except that it tests ``choose``'s first case (passthrough)
inline before calling it, to spare the common response the call
(tests/lb/test_framing.py holds the two to the same answer on every input).

* ``PASSTHROUGH`` (the common case): the head carries nothing
  connection-specific, the body is framed by Content-Length or chunking (or is
  none: 204, 304), and the client speaks HTTP/1.1 with keep-alive and has sent
  its whole request. The replica's bytes go to the client exactly as read.
* every other mode rebuilds the head (without hop-by-hop headers) and
  re-frames the body: ``HEAD`` and ``NO_BODY`` have none; ``LENGTH`` keeps the
  bytes as they come; ``RECHUNKED`` chunks a body afresh for a 1.1 client,
  ``DECHUNKED`` sends it raw to a 1.0 client and closes; ``CLOSE_CHUNKED`` and
  ``CLOSE_RAW`` are bodies that end when the replica closes.

Pure: no I/O. ``response_end`` re-parses a response's bytes to find where it
ended, for a replica that sent more than one response's worth.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum

import httptools

from steadyserve.lb.http import codings

# What on_body does with a body's bytes.
BODY_NONE = 0  # nothing: no body, or passthrough (the read bytes go as they are)
BODY_RAW = 1  # as they come
BODY_CHUNKED = 2  # as one chunk each

LAST_CHUNK = b"0\r\n\r\n"
CHUNKED_LINE = b"transfer-encoding: chunked\r\n"


class Framing(IntEnum):
    """A response's framing towards the client (compared with ``is``)."""

    PENDING = 0  # its head is not complete yet: the bytes are held
    PASSTHROUGH = 1  # the replica's bytes, unchanged
    HEAD = 2  # the answer to a HEAD: complete at its head
    NO_BODY = 3  # 204, 304 rebuilt
    LENGTH = 4  # Content-Length body, rebuilt head
    RECHUNKED = 5  # a chunked (or otherwise encoded) body, re-chunked for HTTP/1.1
    DECHUNKED = 6  # the same, sent raw to an HTTP/1.0 client, which is then closed
    CLOSE_CHUNKED = 7  # no length: until the replica closes, re-chunked for HTTP/1.1
    CLOSE_RAW = 8  # no length: until the replica closes, raw to HTTP/1.0, then closed


class Rule:
    """What one framing mode does (see ``RULES``)."""

    __slots__ = (
        "as_read",
        "at_close",
        "at_end",
        "body",
        "closes_client",
        "complete_at_head",
        "ends_at_close",
        "header",
        "keeps_te",
        "reusable",
    )

    def __init__(
        self,
        *,
        as_read: bool = False,
        body: int = BODY_NONE,
        header: bytes = b"",
        keeps_te: bool = False,
        complete_at_head: bool = False,
        at_end: bytes = b"",
        ends_at_close: bool = False,
        at_close: bytes = b"",
        closes_client: bool = False,
        reusable: bool = True,
    ) -> None:
        self.as_read = as_read  # forward whole reads, no head rebuilt
        self.body = body  # BODY_*: on_body's work
        self.header = header  # the framing line of the rebuilt head
        self.keeps_te = keeps_te  # the rebuilt head keeps the replica's Transfer-Encoding
        self.complete_at_head = complete_at_head  # no body will be parsed (a new parser after)
        self.at_end = at_end  # written when httptools completes the message
        self.ends_at_close = ends_at_close  # the replica closing ends the body (else a failure)
        self.at_close = at_close  # written then
        self.closes_client = closes_client  # the client connection closes after the response
        self.reusable = reusable  # the replica connection may be pooled (if keep-alive)


RULES: Mapping[Framing, Rule] = {
    Framing.PENDING: Rule(),
    Framing.PASSTHROUGH: Rule(as_read=True),
    Framing.HEAD: Rule(keeps_te=True, complete_at_head=True),
    Framing.NO_BODY: Rule(keeps_te=True),
    Framing.LENGTH: Rule(body=BODY_RAW),
    Framing.RECHUNKED: Rule(body=BODY_CHUNKED, header=CHUNKED_LINE, at_end=LAST_CHUNK),
    Framing.DECHUNKED: Rule(body=BODY_RAW, closes_client=True),
    Framing.CLOSE_CHUNKED: Rule(
        body=BODY_CHUNKED,
        header=CHUNKED_LINE,
        at_end=LAST_CHUNK,
        ends_at_close=True,
        at_close=LAST_CHUNK,
        reusable=False,
    ),
    Framing.CLOSE_RAW: Rule(body=BODY_RAW, ends_at_close=True, closes_client=True, reusable=False),
}

PENDING = Framing.PENDING
PASSTHROUGH = Framing.PASSTHROUGH
# The two rules every response reads, looked up once (upstream.py, per response).
PENDING_RULE = RULES[PENDING]
PASSTHROUGH_RULE = RULES[PASSTHROUGH]


def choose(
    status: int,
    clean: bool,
    has_length: bool,
    te: bytes | None,
    interim: bool,
    passthrough_ok: bool,
    request_done: bool,
    draining: bool,
    method_head: bool,
    http10: bool,
) -> Framing:
    """The framing of a final (>= 200) response. ``clean``: the head has no
    hop-by-hop header but ``Transfer-Encoding: chunked`` and ``Connection:
    keep-alive``; ``interim``: a 1xx went before it (its rebuilt head is out);
    ``passthrough_ok``, ``method_head``, ``http10``: the request's (Exchange)."""
    if (
        clean
        and passthrough_ok
        and request_done
        and not interim
        and (has_length or te is not None or status == 204 or status == 304)
        and not draining
    ):
        return PASSTHROUGH
    if method_head:
        return Framing.HEAD
    if status == 204 or status == 304:
        return Framing.NO_BODY
    if te is None or not chunked_last(te):
        # No framing, or codings without chunked last: the body ends when the
        # replica closes (RFC 9112 6.3 (4) and (7)).
        if has_length and te is None:
            return Framing.LENGTH
        return Framing.CLOSE_RAW if http10 else Framing.CLOSE_CHUNKED
    return Framing.DECHUNKED if http10 else Framing.RECHUNKED


def chunked_last(te: bytes) -> bool:
    """Is chunked the final coding (the body framed by chunks, not by the close)?"""
    found = codings(te)
    return bool(found) and found[-1].lower() == b"chunked"


def rechunked_line(te: bytes | None) -> bytes:
    """The Transfer-Encoding of a body re-chunked for the client: the replica's
    other codings (gzip ...) stay, so the client still undoes them; chunked last."""
    if te is None or te.lower() == b"chunked":
        return CHUNKED_LINE
    kept = [c for c in codings(te) if c.lower() != b"chunked"]
    return b"transfer-encoding: %s\r\n" % b", ".join((*kept, b"chunked"))


def head_end(
    rule: Rule, te: bytes | None, request_id: bytes | None, close: bool, http10: bool
) -> bytes:
    """The lines a rebuilt head ends with: its framing (``te``: the replica's
    Transfer-Encoding), the X-Request-Id (None: the access log is off) and
    persistence (``close``: the client connection closes after it)."""
    framing = rule.header
    if rule.body == BODY_CHUNKED and te is not None:
        framing = rechunked_line(te)
    elif rule.keeps_te and te is not None:
        framing = b"transfer-encoding: %s\r\n" % te
    if request_id is not None:
        framing += b"x-request-id: %s\r\n" % request_id
    if close:
        framing += b"connection: close\r\n"
    elif http10:
        framing += b"connection: keep-alive\r\n"
    return framing


def response_end(seen: list[bytes]) -> int | None:
    """Where in ``seen[-1]`` (the last read) the response whose bytes ``seen``
    holds, from its first, ends: re-parsed, the last read a byte at a time.
    None when it does not end there or does not parse."""
    if not seen:
        return None
    probe = _EndProbe()
    parser = httptools.HttpResponseParser(probe)
    data = seen[-1]
    try:
        for piece in seen[:-1]:
            parser.feed_data(piece)
        for i in range(len(data)):
            parser.feed_data(data[i : i + 1])
            if probe.done:
                return i + 1
    except httptools.HttpParserError:
        return None
    return None


class _EndProbe:
    """Parser callbacks that only notice where a final (non-1xx) response ends."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def on_message_complete(self) -> None:
        self.done = True
