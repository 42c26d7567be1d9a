"""A response's framing mode and its rule, without sockets: ``choose`` against the
decision written out again for every input, the table's promises, and the real
upstream connection forwarding each mode's bytes in every split (lb/framing.py)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import httptools
import pytest
from _sockless import Rig

from steadyserve.lb.framing import (
    BODY_CHUNKED,
    BODY_NONE,
    LAST_CHUNK,
    RULES,
    Framing,
    choose,
    response_end,
)

F = Framing


def reference(
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
    """The decision as upstream.py made it inline before it had modes."""
    framed = has_length or te is not None or status in (204, 304)
    if clean and passthrough_ok and request_done and not interim and framed and not draining:
        return F.PASSTHROUGH
    if method_head:
        return F.HEAD
    if status in (204, 304):
        return F.NO_BODY
    if te is None and has_length:
        return F.LENGTH
    until_close = te is None
    if http10:
        return F.CLOSE_RAW if until_close else F.DECHUNKED
    return F.CLOSE_CHUNKED if until_close else F.RECHUNKED


INPUTS: list[tuple[Any, ...]] = list(
    itertools.product(
        (200, 204, 304, 404),
        (False, True),
        (False, True),
        (None, b"chunked", b"gzip, chunked"),
        *[(False, True)] * 6,
    )
)


def test_choose_matches_the_reference_on_every_input() -> None:
    seen = set()
    for args in INPUTS:
        mode = choose(*args)
        assert mode is reference(*args), args
        seen.add(mode)
    assert seen == set(Framing) - {F.PENDING}  # every final mode is reachable


def test_the_table_keeps_its_promises() -> None:
    assert set(RULES) == set(Framing)
    for mode, rule in RULES.items():
        # Only passthrough forwards reads as they are; it then re-frames nothing.
        assert rule.as_read == (mode is F.PASSTHROUGH)
        # A chunked body ends with the last chunk, whether httptools or a close ends it.
        assert (rule.body == BODY_CHUNKED) == (rule.at_end == LAST_CHUNK)
        assert rule.at_close == (
            LAST_CHUNK if rule.body == BODY_CHUNKED and rule.ends_at_close else b""
        )
        # A body the replica ends by closing leaves no connection to pool.
        assert rule.reusable == (not rule.ends_at_close)
        # Without a length a 1.0 client learns the end only when it is closed.
        assert rule.closes_client == (mode in (F.DECHUNKED, F.CLOSE_RAW))
        assert rule.keeps_te == (rule.body == BODY_NONE and mode in (F.HEAD, F.NO_BODY))
        assert rule.complete_at_head == (mode is F.HEAD)


def test_response_end_finds_the_end_of_the_first_response_only() -> None:
    one = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    for cut in range(1, len(one)):
        assert response_end([one[:cut], one[cut:] + b"HTTP/1.1 200 OK\r\n"]) == len(one) - cut
    assert response_end([b"NOT HTTP\r\n\r\n"]) is None
    assert response_end([b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nok"]) is None


class Decoded:
    """A response as a client reads it: status, headers, body (chunking undone, which
    follows the reads)."""

    def __init__(self, data: bytes) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        parser = httptools.HttpResponseParser(self)
        parser.feed_data(data)
        self.status = parser.get_status_code()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def key(self) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        return self.status, self.headers, self.body


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


GET11 = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
HEAD11 = b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"
GET10 = b"GET / HTTP/1.0\r\n\r\n"
LENGTH = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
HOP = b"HTTP/1.1 200 OK\r\nkeep-alive: 5\r\n"

# (request, response, does the replica close after, mode, what the client gets, pooled after)
CASES = [
    (GET11, LENGTH, False, F.PASSTHROUGH, LENGTH, True),
    (GET11, CHUNKED, False, F.PASSTHROUGH, CHUNKED, True),
    (
        HEAD11,
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
        False,
        F.HEAD,
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
        True,
    ),
    (GET11, HOP + b"\r\n", False, F.NO_BODY, b"", True),
    (
        GET11,
        HOP + b"content-length: 5\r\n\r\nhello",
        False,
        F.LENGTH,
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
        True,
    ),
    (
        GET11,
        HOP + b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        False,
        F.RECHUNKED,
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        True,
    ),
    (
        GET10,
        CHUNKED,
        False,
        F.DECHUNKED,
        b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello",
        True,
    ),
    (
        GET11,
        b"HTTP/1.1 200 OK\r\n\r\nhello",
        True,
        F.CLOSE_CHUNKED,
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        False,
    ),
    (
        GET10,
        b"HTTP/1.1 200 OK\r\n\r\nhello",
        True,
        F.CLOSE_RAW,
        b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello",
        False,
    ),
]


@pytest.mark.parametrize(("request_", "response", "closes", "mode", "expected", "pooled"), CASES)
def test_each_mode_forwards_its_bytes_in_every_split(
    loop: asyncio.AbstractEventLoop,
    request_: bytes,
    response: bytes,
    closes: bool,
    mode: Framing,
    expected: bytes,
    pooled: bool,
) -> None:
    if mode is F.NO_BODY:
        response = response.replace(b"200 OK", b"204 No Content")
        expected = b"HTTP/1.1 204 No Content\r\n\r\n"
    for cut in range(1, len(response) + 1):
        rig = Rig(loop)
        try:
            rig.client.data_received(request_)
            upstream = rig.upstream
            for piece in (response[:cut], response[cut:]):
                if piece:
                    upstream.data_received(piece)
            assert upstream.framing is mode
            if closes:
                upstream.connection_lost(None)
            got = rig.client_transport.bytes()
            if RULES[mode].body == BODY_CHUNKED:
                assert Decoded(got).key() == Decoded(expected).key(), cut
            else:
                assert got == expected, cut
            assert [ex.status for ex in rig.records] == [int(expected.split(b" ")[1])]
            assert upstream.in_pool == pooled
            assert rig.client_transport.closed == RULES[mode].closes_client
        finally:
            rig.close()


# Requests as upstream.py sees them: (the request's bytes, its body still arriving).
FRAMING_REQUESTS = [
    GET11,
    HEAD11,
    GET10,
    b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    # Larger than the buffer: routed, and answered, before its body has all arrived.
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 70000\r\n\r\n" + b"x" * 65536,
]


def test_the_connection_frames_every_head_as_choose_does(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # upstream.py tests choose()'s first case (passthrough) inline before calling
    # it: the two must agree on every input a real connection can be given.
    seen = set()
    for request_, draining, status, hop, has_length, te, interim in itertools.product(
        FRAMING_REQUESTS,
        (False, True),
        (200, 204, 304, 404),
        (False, True),
        (False, True),
        (None, b"chunked", b"gzip, chunked"),
        (False, True),
    ):
        if has_length and te is not None:
            continue  # httptools refuses both (request smuggling), before any framing
        head = b"HTTP/1.1 100 Continue\r\n\r\n" if interim else b""
        head += b"HTTP/1.1 %d X\r\n" % status
        head += b"keep-alive: 5\r\n" if hop else b""
        head += b"content-length: 5\r\n" if has_length else b""
        head += b"transfer-encoding: %s\r\n" % te if te is not None else b""
        rig = Rig(loop)
        try:
            rig.client.data_received(request_)
            ex = rig.upstream.exchange
            assert ex is not None
            rig.proxy.draining = draining
            rig.upstream.data_received(head + b"\r\n")
            clean = not hop and te != b"gzip, chunked"
            want = choose(
                status,
                clean,
                has_length,
                te,
                interim,
                ex.passthrough_ok,
                ex.request_done,
                draining,
                ex.method_head,
                ex.http10,
            )
            assert rig.upstream.framing is want, (request_[:40], head)
            seen.add(want)
        finally:
            rig.close()
    assert seen == set(Framing) - {F.PENDING}
