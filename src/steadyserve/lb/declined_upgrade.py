"""Upgrades the load balancer declines are served as plain HTTP/1.1.

RFC 9110 (7.8) lets a server ignore ``Upgrade``, and nginx and HAProxy do: a
request asking for ``h2c`` (``curl --http2 http://...``, Java's HttpClient by
default) gets an ordinary HTTP/1.1 answer. Only WebSocket upgrades are tunnelled
(lb/websocket.py). httptools, however, stops at every upgrade head it sees: it
calls ``on_message_complete`` without reading the body and raises
``HttpParserUpgrade``, and that parser parses nothing more.

So the connection goes on with a new parser. A declined request that has a body
still needs it read, with its own framing: the new parser is first fed a
synthetic head carrying just that framing, and the callbacks of that one head
are dropped (``BodyAfterDeclinedUpgrade``), so the client's body bytes that
follow reach the connection's ``on_body`` as usual, and every later request is
parsed normally. Nothing of the synthetic head is ever forwarded.
"""

from __future__ import annotations

from typing import Protocol

import httptools


class RequestCallbacks(Protocol):
    """The httptools callbacks of a client connection (lb/downstream.py)."""

    def on_message_begin(self) -> None: ...
    def on_url(self, url: bytes) -> None: ...
    def on_header(self, name: bytes, value: bytes) -> None: ...
    def on_headers_complete(self) -> None: ...
    def on_body(self, body: bytes) -> None: ...
    def on_message_complete(self) -> None: ...


def body_framing(content_length: int, chunked: bool) -> bytes:
    """The framing line of a declined request's body (b"" when it has none)."""
    if chunked:
        return b"transfer-encoding: chunked\r\n"
    if content_length > 0:
        return b"content-length: %d\r\n" % content_length
    return b""


def parser_after(conn: RequestCallbacks, framing: bytes) -> httptools.HttpRequestParser:
    """The parser that reads on after a declined upgrade's head: ready for the
    body ``framing`` announces, then for the next request."""
    if not framing:
        return httptools.HttpRequestParser(conn)
    parser = httptools.HttpRequestParser(BodyAfterDeclinedUpgrade(conn))
    parser.feed_data(b"POST / HTTP/1.1\r\nhost: -\r\n%s\r\n" % framing)
    return parser


class BodyAfterDeclinedUpgrade:
    """Parser callbacks that drop the synthetic head's and pass on everything else."""

    __slots__ = ("conn", "synthetic")

    def __init__(self, conn: RequestCallbacks) -> None:
        self.conn = conn
        self.synthetic = True  # until the declined request's body is complete

    def on_message_begin(self) -> None:
        if not self.synthetic:
            self.conn.on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self.synthetic:
            self.conn.on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.synthetic:
            self.conn.on_header(name, value)

    def on_headers_complete(self) -> None:
        if not self.synthetic:
            self.conn.on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self.conn.on_body(body)

    def on_message_complete(self) -> None:
        self.synthetic = False
        self.conn.on_message_complete()
