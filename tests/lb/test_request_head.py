"""A request head's verdict, without sockets: every refusal with its status and
reason, the order that picks between several faults, what an accepted head
forwards, and generated heads judged the same by ``decide`` as by the client
connection that serves them (lb/request_head.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import httptools
import pytest
from _sockless import PEER, Rig
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.lb.http import STATUS_LINES
from steadyserve.lb.request_head import (
    BUFFER,
    CONTINUE,
    DISPATCH,
    REJECT,
    TUNNEL,
    Move,
    RequestHead,
    RequestRejected,
    decide,
)
from steadyserve.lb.retry import IDEMPOTENT_METHODS


@dataclass
class Rules:
    max_body_bytes: int = 1000
    max_header_bytes: int = 65536
    blocked_paths: frozenset[bytes] = frozenset()
    websockets: object | None = None
    auth: bytes | None = None
    idempotent_methods: frozenset[bytes] = IDEMPOTENT_METHODS


@dataclass
class Facts:
    head: bytes = b""
    keep_alive: bool = True
    http10: bool = False
    method_head: bool = False
    passthrough_ok: bool = True
    idempotent: bool = False
    pin: int | None = None


class Parsed:
    """httptools' callbacks for one head: the RequestHead's, and the parser's answers."""

    def __init__(self) -> None:
        self.head = RequestHead(PEER.encode())
        self.on_url = self.head.on_url
        self.on_header = self.head.on_header
        self.parser = httptools.HttpRequestParser(self)
        self.answers: tuple[bytes, str, bool, bool] | None = None

    def on_message_begin(self) -> None:
        self.head.begin()

    def on_headers_complete(self) -> None:
        p = self.parser
        self.answers = (
            p.get_method(),
            p.get_http_version(),
            p.should_keep_alive(),
            p.should_upgrade(),
        )


def judge(
    raw: bytes, rules: Rules | None = None, shortcut: bool = False
) -> tuple[Move | RequestRejected | None, RequestHead, Facts]:
    """Parse ``raw``'s head and judge it: the move (or the header-time refusal;
    None for bytes httptools refuses)."""
    parsed = Parsed()
    try:
        parsed.parser.feed_data(raw)
    except httptools.HttpParserCallbackError as exc:
        assert isinstance(exc.__context__, RequestRejected)
        return exc.__context__, parsed.head, Facts()
    except httptools.HttpParserUpgrade:
        pass
    except httptools.HttpParserError:
        return None, parsed.head, Facts()
    assert parsed.answers is not None
    method, version, keep_alive, upgrade = parsed.answers
    head = parsed.head
    facts = Facts()
    if shortcut and keep_alive and not head.connection_seen:
        version_arg: str | None = None
    else:
        version_arg = version
    move = decide(
        head, facts, method, version_arg, keep_alive, head.upgrade and upgrade, rules or Rules()
    )
    return move, head, facts


def refusal(raw: bytes, rules: Rules | None = None) -> tuple[int, str]:
    move, head, _ = judge(raw, rules)
    if isinstance(move, RequestRejected):
        return move.status, move.reason
    assert move is REJECT and head.rejected is not None
    return head.rejected.status, head.rejected.reason


REFUSALS = [
    (b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", Rules(auth=b"k3y"), 401, "unauthorized"),
    (
        b"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k3y-not\r\n\r\n",
        Rules(auth=b"k3y"),
        401,
        "unauthorized",
    ),
    (
        b"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Basic k3y\r\n\r\n",
        Rules(auth=b"k3y"),
        401,
        "unauthorized",
    ),
    (b"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", None, 501, "connect_method"),
    (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n", None, 413, "body_too_large"),
    (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", None, 505, "http_version"),
    (b"GET / HTTP/1.1\r\n\r\n", None, 400, "bad_host"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", None, 400, "bad_host"),
    (b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", None, 400, "bad_host"),
    (b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", None, 400, "bad_target"),
    (b"GET ftp://h/x HTTP/1.1\r\nHost: h\r\n\r\n", None, 400, "bad_target"),
    (
        b"GET /-/x HTTP/1.1\r\nHost: h\r\n\r\n",
        Rules(blocked_paths=frozenset({b"/-/x"})),
        404,
        "blocked_path",
    ),
    (
        b"GET //-/%78 HTTP/1.1\r\nHost: h\r\n\r\n",
        Rules(blocked_paths=frozenset({b"/-/x"})),
        404,
        "blocked_path",
    ),
    (
        b"GET / HTTP/1.1\r\nHost: h\r\nX-A: " + b"a" * 200 + b"\r\n\r\n",
        Rules(max_header_bytes=100),
        431,
        "headers_too_large",
    ),
    (
        b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: websocket\r\n"
        b"Content-Length: 2\r\n\r\nhi",
        Rules(websockets=object()),
        400,
        "websocket_body",
    ),
    (b"GET / HTTP/1.1\r\nHost: h\r\nX-Steady-Version: 01\r\n\r\n", None, 400, "bad_version_pin"),
    (b"GET / HTTP/1.1\r\nHost: h\r\nX-Steady-Version: +2\r\n\r\n", None, 400, "bad_version_pin"),
]


@pytest.mark.parametrize(("raw", "rules", "status", "reason"), REFUSALS)
def test_every_refusal_has_its_status_and_reason(
    raw: bytes, rules: Rules | None, status: int, reason: str
) -> None:
    assert refusal(raw, rules) == (status, reason)


def test_a_content_length_int_cannot_read_is_refused_as_it_arrives() -> None:
    # httptools refuses most such values itself; the head refuses what reaches it.
    with pytest.raises(RequestRejected) as caught:
        RequestHead().on_header(b"Content-Length", b"x")
    assert (caught.value.status, caught.value.reason) == (400, "bad_content_length")


def test_the_earliest_fault_decides_the_refusal() -> None:
    faults = b"Content-Length: 5000\r\nHost: a\r\nHost: b\r\n"
    assert refusal(b"CONNECT h:1 HTTP/1.1\r\n" + faults + b"\r\n") == (501, "connect_method")
    assert refusal(b"POST / HTTP/1.1\r\n" + faults + b"\r\n") == (413, "body_too_large")
    two_hosts = b"Host: a\r\nHost: b\r\nConnection: close\r\n"
    assert refusal(b"GET / HTTP/2.0\r\n" + two_hosts + b"\r\n") == (505, "http_version")
    blocked = Rules(blocked_paths=frozenset({b"/x"}))
    assert refusal(b"GET /%2e%2e/x HTTP/1.1\r\n" + two_hosts + b"\r\n", blocked) == (
        400,
        "bad_host",
    )


def test_a_plain_get_is_dispatched_with_x_forwarded_for() -> None:
    move, _, facts = judge(b"GET /a?b HTTP/1.1\r\nHost: h\r\nUser-Agent: t\r\n\r\n")
    assert move is DISPATCH
    assert facts.head == (
        b"GET /a?b HTTP/1.1\r\nHost: h\r\nUser-Agent: t\r\nx-forwarded-for: 10.0.0.7\r\n\r\n"
    )
    assert (facts.keep_alive, facts.http10, facts.idempotent, facts.passthrough_ok) == (
        True,
        False,
        True,
        True,
    )


def test_hop_by_hop_and_named_connection_options_are_dropped() -> None:
    raw = (
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: x-foo, keep-alive\r\nX-Foo: 1\r\n"
        b"Keep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 1.2.3.4\r\nX-Bar: 2\r\n\r\n"
    )
    move, _, facts = judge(raw)
    assert move is DISPATCH
    assert facts.head == (
        b"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4, 10.0.0.7\r\nX-Bar: 2\r\n\r\n"
    )


def test_a_body_is_buffered_and_expect_is_answered_here() -> None:
    raw = b"PUT /u HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
    move, head, facts = judge(raw)
    # PUT is idempotent with a body too: a retry replays the body the LB holds.
    assert move is BUFFER and head.continue_100 and facts.idempotent
    assert b"expect" not in facts.head.lower()
    post = raw.replace(b"PUT", b"POST")
    _, _, facts = judge(post)
    assert not facts.idempotent
    _, _, facts = judge(post, Rules(idempotent_methods=frozenset({b"POST"})))
    assert facts.idempotent  # a method the service file marks
    move, head, _ = judge(raw.replace(b"HTTP/1.1", b"HTTP/1.0"))
    assert move is BUFFER and not head.continue_100  # a 1.0 client never waits for it


def test_absolute_form_puts_its_authority_in_the_host_header() -> None:
    move, _, facts = judge(b"GET http://other:81/p HTTP/1.1\r\nHost: h\r\n\r\n")
    assert move is DISPATCH
    assert facts.head.startswith(b"GET /p HTTP/1.1\r\nHost: other:81\r\n")


def test_a_websocket_handshake_is_tunnelled_only_when_websockets_are_on() -> None:
    raw = b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    move, head, facts = judge(raw, Rules(websockets=object()))
    assert move is TUNNEL and not facts.idempotent and head.declined is None
    assert facts.head.endswith(
        b"connection: upgrade\r\nupgrade: websocket\r\nx-forwarded-for: 10.0.0.7\r\n\r\n"
    )
    move, head, facts = judge(raw)  # declined: plain HTTP/1.1, no upgrade forwarded
    assert move is DISPATCH and head.declined == b"" and b"upgrade" not in facts.head.lower()


def test_a_pin_is_carried_and_never_forwarded() -> None:
    move, _, facts = judge(b"GET / HTTP/1.1\r\nHost: h\r\nX-Steady-Version: 12\r\n\r\n")
    assert move is DISPATCH and facts.pin == 12 and b"steady" not in facts.head.lower()


# -- generated heads: decide against the connection that serves them ------------------
HEADERS = [
    b"Host: h.example",
    b"Host: other",
    b"Content-Length: 0",
    b"Content-Length: 3",
    b"Content-Length: 5000",
    b"Transfer-Encoding: chunked",
    b"Connection: close",
    b"Connection: keep-alive",
    b"Connection: upgrade",
    b"Connection: x-foo",
    b"X-Foo: 1",
    b"Upgrade: websocket",
    b"Upgrade: h2c",
    b"X-Steady-Version: 1",  # the version of the rig's replica
    b"X-Steady-Version: 03",
    b"X-Forwarded-For: 1.2.3.4",
    b"Expect: 100-continue",
    b"TE: trailers",
    b"X-Long: " + b"y" * 120,
]
heads = st.builds(
    lambda method, target, version, headers: (
        method
        + b" "
        + target
        + b" HTTP/"
        + version
        + b"\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"\r\n"
    ),
    st.sampled_from([b"GET", b"HEAD", b"POST", b"OPTIONS", b"CONNECT", b"DELETE"]),
    st.sampled_from(
        [b"/", b"/a?b", b"/a/../b", b"http://x:1/y", b"//z", b"/%2e%2e/", b"/-/x", b"h:443"]
    ),
    st.sampled_from([b"1.1", b"1.0", b"0.9", b"2.0", b"1.2"]),
    st.lists(st.sampled_from(HEADERS), max_size=5),
)
rules = st.builds(
    Rules,
    max_body_bytes=st.sampled_from([2, 1000]),
    max_header_bytes=st.sampled_from([150, 65536]),
    blocked_paths=st.sampled_from([frozenset(), frozenset({b"/-/x"})]),
    websockets=st.sampled_from([None, object()]),
)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def body_of(raw: bytes) -> bytes:
    low = raw.lower()
    if b"transfer-encoding: chunked" in low:
        return b"2\r\nab\r\n0\r\n\r\n"  # within every max_body_bytes generated
    return b"abc" if b"content-length: 3" in low else b""


@settings(max_examples=300, deadline=None)
@given(raw=heads, rules=rules)
def test_generated_heads_are_judged_as_the_connection_serves_them(
    loop: asyncio.AbstractEventLoop, raw: bytes, rules: Rules
) -> None:
    move, head, facts = judge(raw, rules)
    # Asking httptools for the version only when it matters changes no verdict.
    short, short_head, short_facts = judge(raw, rules, shortcut=True)
    assert (type(short), short_facts, short_head.continue_100) == (
        type(move),
        facts,
        head.continue_100,
    )
    rig = Rig(loop, max_body_bytes=rules.max_body_bytes, max_header_bytes=rules.max_header_bytes)
    rig.proxy.blocked_paths = rules.blocked_paths
    rig.proxy.websockets = rules.websockets  # type: ignore[assignment]
    try:
        rig.client.data_received(raw + body_of(raw))
        got = rig.client_transport.bytes()
        sent = rig.upstream_transport.bytes()
        if move is None:  # httptools' own refusal
            assert got.startswith(STATUS_LINES[400]) and not sent
            return
        if head.continue_100 and move is not DISPATCH:
            assert got.startswith(CONTINUE)
            got = got[len(CONTINUE) :]
        if isinstance(move, RequestRejected) or move is REJECT:
            rejected = move if isinstance(move, RequestRejected) else head.rejected
            assert rejected is not None
            assert got.startswith(STATUS_LINES[rejected.status]) and not sent
            assert [getattr(ex, "reason", None) for ex in rig.records] == [rejected.reason]
        else:
            assert not got
            assert sent.startswith(facts.head)
            ex = rig.upstream.exchange
            assert ex is not None and ex.pin == facts.pin
            assert (ex.keep_alive, ex.http10, ex.method_head) == (
                facts.keep_alive,
                facts.http10,
                facts.method_head,
            )
            assert (ex.passthrough_ok, ex.idempotent) == (facts.passthrough_ok, facts.idempotent)
            assert (rig.client.upgrading is ex) == (move is TUNNEL)
    finally:
        rig.close()


def test_the_preview_head_pins_its_version_whatever_the_client_sends() -> None:
    from steadyserve.lb.preview import PinnedHead, Preview

    preview = Preview.__new__(Preview)
    preview.version = 4
    head = PinnedHead(preview)
    head.begin()
    head.url = b"/"
    head.on_header(b"Host", b"h")
    head.on_header(b"X-Steady-Version", b"not a pin")  # stripped and ignored here
    facts = Facts()
    assert decide(head, facts, b"GET", None, True, False, Rules()) is DISPATCH
    assert facts.pin == 4 and b"steady" not in facts.head.lower()


# -- the per-request reset: marked heads only ------------------------------------------
RESET_EXEMPT = {"declined", "host_at", "rejected"}  # outlive the head, or read only when set


def reset_state(head: RequestHead) -> dict[str, object]:
    return {name: getattr(head, name) for name in RequestHead.__slots__ if name not in RESET_EXEMPT}


def assert_next_head_is_fresh(loop: asyncio.AbstractEventLoop, raw: bytes) -> None:
    """begin resets the rarer fields only when a header marked the head, and the
    connection resets an unmarked one inline: either way, whatever the last head
    was, the next request's head must start as a new one does."""
    fresh = reset_state(RequestHead(PEER.encode()))
    rig = Rig(loop)
    try:
        rig.client.data_received(raw + body_of(raw) + b"G")  # the next request begins
        if rig.client.in_head and not rig.client.closing:  # not refused or upgraded
            assert reset_state(rig.client.head) == fresh
    finally:
        rig.close()


@pytest.mark.parametrize("header", HEADERS)
def test_after_any_one_header_the_next_request_starts_from_a_fresh_head(
    loop: asyncio.AbstractEventLoop, header: bytes
) -> None:
    for start in (b"GET / HTTP/1.1", b"POST /a HTTP/1.1", b"GET / HTTP/1.0"):
        assert_next_head_is_fresh(loop, start + b"\r\nHost: h\r\n" + header + b"\r\n\r\n")


@settings(max_examples=200, deadline=None)
@given(raw=heads)
def test_after_any_head_the_next_request_starts_from_a_fresh_head(
    loop: asyncio.AbstractEventLoop, raw: bytes
) -> None:
    assert_next_head_is_fresh(loop, raw)


def test_a_preview_connection_pins_each_request_to_the_version_of_its_time(
    loop: asyncio.AbstractEventLoop,
) -> None:
    from steadyserve.lb.preview import PinnedConnection, Preview

    preview = Preview.__new__(Preview)
    preview.version = 1
    rig = Rig(loop)
    rig.client = PinnedConnection(rig.proxy, preview)
    rig.client.connection_made(rig.client_transport)  # type: ignore[arg-type]
    try:
        for version in (1, 5, 1):  # the rig's replica is version 1: 5 finds none
            preview.version = version
            rig.client.data_received(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            if rig.upstream.exchange is not None:
                rig.upstream.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        assert [ex.pin for ex in rig.records] == [1, 5, 1]
    finally:
        rig.close()


def test_a_request_bearing_the_auth_key_passes_and_forwards_it() -> None:
    """SkyServe's auth_key: Bearer (any case) and the key, on any header line."""
    for line in (b"Authorization: Bearer k3y", b"authorization: bearer  k3y "):
        raw = b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n" + line + b"\r\n\r\n"
        move, _, facts = judge(raw, Rules(auth=b"k3y"))
        assert move is DISPATCH, line
        assert line.split(b":")[0] in facts.head  # the replica sees it, as in SkyServe
    assert judge(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", Rules())[0] is DISPATCH
