"""Request bytes mutated at random: whatever the load balancer makes of them, it
forwards only requests h11 reads cleanly, framed as h11 frames the client's bytes.

Where tests/generative/test_request_head_h11.py writes named quirks, this one
inserts, deletes and replaces bytes (CR, LF, SP, HTAB, NUL, ':', ',', digits,
framing headers) in valid connections, so it finds shapes nobody named: the
", chunked" that reached the replica as written was found this way. Differences in
what each side accepts are not checked here (the named quirks say which are
allowed); what is checked holds for any bytes: each forwarded request parses in
h11, and a request both sides serve has the same method and body in both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.generative.differential import h11_reading, lb_reading
from tests.generative.heads import Request, write

BASES = [
    write(Request()),
    write(Request(method=b"POST", body=b"hello")),
    write(Request(method=b"POST", chunked=[b"abc", b"de"])),
    write(Request(version=b"1.0", keep_alive=True, headers=[(b"X-A", b"b c")]))
    + write(Request(target=b"/2")),
    write(Request(method=b"POST", body=b"abc")) + write(Request(target=b"/2")),
]
PIECES = [
    b" ",
    b"\t",
    b"\r",
    b"\n",
    b"\r\n",
    b"\r\n ",
    b"\x00",
    b":",
    b",",
    b";",
    b"0",
    b"5",
    b"a",
    b"\x7f",
    b"\x80",
    b"Transfer-Encoding: chunked\r\n",
    b"Content-Length: 0\r\n",
    b"Content-Length: 5\r\n",
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(raw)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.sampled_from(PIECES))
        if op == "insert":
            raw[at:at] = piece
        elif op == "delete":
            del raw[at : at + 1]
        else:
            raw[at : at + 1] = piece
    return bytes(raw)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def check(loop: asyncio.AbstractEventLoop, raw: bytes) -> None:
    lb = lb_reading(loop, raw)  # raises if a forwarded request does not parse in h11
    ref = h11_reading(raw)
    for i, (a, b) in enumerate(zip(lb.served, ref.served, strict=False)):
        assert (a.method, a.body) == (b.method, b.body), f"request {i} of {raw!r}"


@settings(max_examples=300)
@given(raw=mutated())
# Found: the empty list element, forwarded as written (see test_request_head_h11.py).
@example(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
def test_mutated_bytes_are_forwarded_only_as_h11_reads_them(
    loop: asyncio.AbstractEventLoop, raw: bytes
) -> None:
    check(loop, raw)
