"""Hostile request targets and Host headers, through a real LB with a blocked path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _lb_helpers import FakeController, LBProcess, Upstream, raw_exchange, wait_for

BLOCKED = "/-/reconfigure"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LBProcess, Upstream]]:
    """An LB whose table blocks /-/reconfigure, over one echoing replica."""
    home = tmp_path_factory.mktemp("home")
    with Upstream("up") as up, FakeController(home) as ctl:
        key = ctl.set_table([(1, up.port)], blocked_paths=[BLOCKED])
        with LBProcess(home) as lb:
            wait_for(lambda: key in ctl.polls, what="table acknowledged")
            yield lb, up


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize(
    "target",
    [
        b"http://x/-/reconfigure",
        b"HTTP://x:8080/-/reconfigure?a=1",
        b"http://user@x/-/./reconfigure",
        b"/-/%72econfigure",
        b"/a/../-/reconfigure",
        b"/%2e%2e/-/reconfigure",
        b"/-%2Freconfigure",
        b"/-/%2572econfigure",
        b"/-\\reconfigure",
        b"//-//reconfigure/",
        b"http://x//-/reconfigure/.",
        # Readings of other servers: Python's urlparse drops a last ";x", Tomcat and
        # Spring every ";x" (and read "..;" as ".."), Express ignores case, most stop
        # at "#", C strings at NUL, old decoders accept overlong UTF-8.
        b"/-/reconfigure;x",
        b"/-/reconfigure;x/",
        b"/-;a/reconfigure",
        b"/-/x/..;/reconfigure",
        b"/-/reconfigure%3Bx",
        b"/-/RECONFIGURE",
        b"/-/reconfigure#x",
        b"/-/reconfigure%00.png",
        b"/-%C0%AFreconfigure",
    ],
)
def test_every_spelling_of_a_blocked_path_is_404(
    guarded: tuple[LBProcess, Upstream], target: bytes
) -> None:
    lb, up = guarded
    before = len(up.requests)
    body = b'{"evil": true}'
    answer = raw_exchange(
        lb.port,
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (target, len(body), body),
    )
    assert status_of(answer) == 404, answer
    assert len(up.requests) == before, "the blocked request reached the replica"


@pytest.mark.parametrize(
    ("target", "forwarded"),
    [
        (b"http://x/echo?q=1", "/echo?q=1"),
        (b"http://x", "/"),
        (b"/a/./b/../echo", "/a/echo"),
        (b"/%65cho%2Fx", "/echo%2Fx"),
        (b"//echo", "/echo"),
    ],
)
def test_replica_gets_the_normalised_origin_form(
    guarded: tuple[LBProcess, Upstream], target: bytes, forwarded: str
) -> None:
    lb, up = guarded
    answer = raw_exchange(
        lb.port, b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target
    )
    assert status_of(answer) in (200, 404), answer
    assert up.requests[-1]["path"] == forwarded


def test_absolute_form_host_replaces_the_host_header(guarded: tuple[LBProcess, Upstream]) -> None:
    lb, up = guarded
    raw_exchange(
        lb.port, b"GET http://real:81/echo HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n"
    )
    assert up.requests[-1]["headers"]["host"] == "real:81"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nHost: a\r\nhost: a\r\nConnection: close\r\n\r\n",
        b"GET x.example:443 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        b"GET ftp://x/echo HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    ],
)
def test_missing_or_double_host_and_bad_targets_are_400(
    guarded: tuple[LBProcess, Upstream], request_bytes: bytes
) -> None:
    lb, up = guarded
    before = len(up.requests)
    assert status_of(raw_exchange(lb.port, request_bytes)) == 400
    assert len(up.requests) == before


def test_http10_without_host_is_still_served(guarded: tuple[LBProcess, Upstream]) -> None:
    lb, _ = guarded
    answer = raw_exchange(lb.port, b"GET /echo HTTP/1.0\r\n\r\n")
    assert status_of(answer) == 200
