"""A WebSocket handshake the replica refuses never turns the connection into a
byte tunnel: what follows is parsed as HTTP by the load balancer again, so a
blocked control path stays blocked, headers are rewritten and replica slots are
freed."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from _lb_helpers import (
    FakeController,
    GatewayProcess,
    LBProcess,
    Upstream,
    read_responses,
    request,
    wait_for,
)

from tests.hostile._raw import upgrade_request

BLOCKED = "/-/reconfigure"
EVIL_BODY = b'{"run": "id > proof.txt"}'
EVIL = (
    b"POST /-/reconfigure HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(EVIL_BODY), EVIL_BODY)
)


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LBProcess, Upstream, FakeController]]:
    """An LB over one http.server replica (which ignores Upgrade) blocking /-/reconfigure."""
    home = tmp_path_factory.mktemp("home")
    with Upstream("up") as up, FakeController(home) as ctl:
        key = ctl.set_table([(1, up.port)], blocked_paths=[BLOCKED])
        with LBProcess(home) as lb:
            wait_for(lambda: key in ctl.polls, what="table acknowledged")
            yield lb, up, ctl


def paths(up: Upstream) -> list[str]:
    return [str(r["path"]) for r in up.requests]


@pytest.mark.parametrize("refusal", [b"/status/403", b"/echo"])
def test_a_blocked_path_after_a_refused_upgrade_never_reaches_the_replica(
    setup: tuple[LBProcess, Upstream, FakeController], refusal: bytes
) -> None:
    lb, up, _ = setup
    with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
        s.sendall(upgrade_request(refusal))
        [first] = read_responses(s, ["GET"])
        assert first.status in (403, 200)
        s.sendall(EVIL)  # the attack: on the same socket, after the refusal
        [second] = read_responses(s, ["POST"])
    assert second.status == 404
    assert BLOCKED not in paths(up)


def test_bytes_sent_with_the_handshake_wait_for_its_answer_and_are_parsed(
    setup: tuple[LBProcess, Upstream, FakeController],
) -> None:
    lb, up, _ = setup
    with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
        s.sendall(upgrade_request(b"/status/403") + EVIL)  # one segment: no 101 yet
        first, second = read_responses(s, ["GET", "POST"])
    assert (first.status, second.status) == (403, 404)
    assert BLOCKED not in paths(up)


def test_a_request_after_a_refused_upgrade_is_proxied_like_any_other(
    setup: tuple[LBProcess, Upstream, FakeController],
) -> None:
    lb, _, _ = setup
    with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
        s.sendall(upgrade_request(b"/status/403"))
        read_responses(s, ["GET"])
        s.sendall(
            b"GET /a/../echo HTTP/1.1\r\nHost: x\r\nX-Steady-Version: 1\r\n"
            b"X-Forwarded-For: 6.6.6.6\r\n\r\n"
        )
        [answer] = read_responses(s, ["GET"])
    assert answer.status == 200
    seen = json.loads(answer.body)  # type: ignore[attr-defined]
    assert seen["path"] == "/echo"  # normalised
    assert "x-steady-version" not in seen["headers"]  # pin header stripped
    assert seen["headers"]["x-forwarded-for"] == "6.6.6.6, 127.0.0.1"


def test_idle_refused_upgrades_hold_no_replica_slot(
    setup: tuple[LBProcess, Upstream, FakeController],
) -> None:
    lb, up, ctl = setup
    key = ctl.set_table([(1, up.port)], max_ongoing=2, blocked_paths=[BLOCKED])
    wait_for(lambda: key in ctl.polls, what="table acknowledged")
    idle = [socket.create_connection(("127.0.0.1", lb.port), timeout=10) for _ in range(4)]
    try:
        for s in idle:
            s.sendall(upgrade_request(b"/status/403"))
            assert read_responses(s, ["GET"])[0].status == 403
        # Four refused handshakes sit idle: a plain request still gets a slot.
        started = time.monotonic()
        status, _, _ = request(lb.port, "GET", "/echo", timeout=5)
        assert status == 200 and time.monotonic() - started < 5
    finally:
        for s in idle:
            s.close()


def test_through_the_gateway_too(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The gateway tunnels no WebSocket (it declines every upgrade and serves the
    request as HTTP/1.1): the same attack must meet the blocked path there too."""
    home = tmp_path_factory.mktemp("gateway")
    with Upstream("up") as up, FakeController(home) as ctl:
        ctl.set_table([(1, up.port)], blocked_paths=[BLOCKED])
        ctl.gateway_routes = {"/": "svc"}
        with GatewayProcess(home) as gateway:
            wait_for(lambda: request(gateway.port, "GET", "/echo")[0] == 200, what="route")
            for data in (upgrade_request(b"/status/403"), upgrade_request(b"/echo")):
                with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
                    s.sendall(data)
                    read_responses(s, ["GET"])
                    s.sendall(EVIL)
                    [answer] = read_responses(s, ["POST"])
                assert answer.status == 404
    assert BLOCKED not in paths(up)
