"""WebSockets follow the same routing rules as plain requests: the version pin,
the blue-green preview port, and the ``max_connections`` cap. The replicas are
raw sockets that accept every handshake and echo."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from _lb_helpers import FakeController, LBProcess, free_port, read_responses, request, wait_for

from tests.hostile._raw import RawReplica, read_response_head, upgrade_request, websocket_script

HANDSHAKES = 10


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LBProcess, FakeController, list[RawReplica], list[bytes]]]:
    """An LB over a version-1 and a version-2 replica."""
    home = tmp_path_factory.mktemp("home")
    heads: list[bytes] = []
    with (
        RawReplica(websocket_script("v1", heads)) as one,
        RawReplica(websocket_script("v2", heads)) as two,
        FakeController(home) as ctl,
    ):
        ctl.set_table([(1, one.port), (2, two.port)], versions={1: 1, 2: 2})
        with LBProcess(home) as lb:
            yield lb, ctl, [one, two], heads


def set_table(ctl: FakeController, replicas: list[RawReplica], **extra: object) -> None:
    key = ctl.set_table(
        [(1, replicas[0].port), (2, replicas[1].port)], versions={1: 1, 2: 2}, extra=extra
    )
    wait_for(lambda: key in ctl.polls, what="table acknowledged")


def handshake(port: int, extra: bytes = b"") -> tuple[socket.socket, int, bytes]:
    """An open socket, the handshake's status and the replica that answered it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(upgrade_request(b"/chat", extra))
    status, headers = read_response_head(s)
    return s, status, headers.get(b"x-replica", b"")


def replicas_reached(port: int, extra: bytes = b"") -> set[bytes]:
    reached = set()
    for _ in range(HANDSHAKES):
        s, status, replica = handshake(port, extra)
        s.close()
        assert status == 101
        reached.add(replica)
    return reached


def test_a_pinned_handshake_reaches_its_version_only(
    fleet: tuple[LBProcess, FakeController, list[RawReplica], list[bytes]],
) -> None:
    lb, ctl, replicas, heads = fleet
    set_table(ctl, replicas)
    assert replicas_reached(lb.port, b"X-Steady-Version: 2\r\n") == {b"v2"}
    assert replicas_reached(lb.port, b"X-Steady-Version: 1\r\n") == {b"v1"}
    assert not any(b"x-steady-version" in h.lower() for h in heads)


@pytest.mark.parametrize("value", [b"1_0", b"+2", b"2 ", b"00002", b"0", b"1234567890", b"2x"])
def test_a_pin_that_is_not_exactly_a_version_number_is_400(
    fleet: tuple[LBProcess, FakeController, list[RawReplica], list[bytes]], value: bytes
) -> None:
    lb, _ctl, _replicas, _ = fleet
    for data in (
        upgrade_request(b"/chat", b"X-Steady-Version: %s\r\n" % value),
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Steady-Version: %s\r\n\r\n" % value,
    ):
        with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
            s.sendall(data)
            [answer] = read_responses(s, ["GET"])
        assert answer.status == 400
        assert b"X-Steady-Version" in answer.body  # type: ignore[attr-defined]


def test_the_preview_port_sends_every_handshake_and_request_to_the_new_version(
    fleet: tuple[LBProcess, FakeController, list[RawReplica], list[bytes]],
) -> None:
    _lb, ctl, replicas, heads = fleet
    port = free_port()
    set_table(ctl, replicas, preview={"port": port, "version": 2})

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    wait_for(listening, what="preview port open")
    try:
        assert replicas_reached(port) == {b"v2"}
        # A client's own pin is stripped and ignored there, whatever its value.
        for value in (b"1", b"1_0"):
            pin = b"X-Steady-Version: %s\r\n" % value
            assert replicas_reached(port, pin) == {b"v2"}
            heads.clear()
            status, _headers, body = request(port, "GET", "/", headers={"X-Steady-Version": "1"})
            assert (status, body) == (200, b"v2")
            assert heads and b"x-steady-version" not in heads[-1].lower()
    finally:
        set_table(ctl, replicas)


def test_open_websockets_count_towards_max_connections(
    fleet: tuple[LBProcess, FakeController, list[RawReplica], list[bytes]],
) -> None:
    lb, ctl, replicas, _ = fleet
    cap = 4
    set_table(ctl, replicas, load_balancer={"max_connections": cap})
    tunnels: list[socket.socket] = []
    idle: list[socket.socket] = []
    try:
        # Two tunnels and two idle keep-alive connections: the cap is reached.
        for _ in range(2):
            s, status, _ = handshake(lb.port)
            assert status == 101
            tunnels.append(s)
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", lb.port), timeout=10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _ = read_response_head(s)
            assert status == 200
            idle.append(s)
        # A fifth connection: an idle plain one is shed for it, never a tunnel.
        status, _, _ = request(lb.port, "GET", "/")
        assert status == 200
        for s in tunnels:
            s.sendall(b"ping")
            assert s.recv(16) == b"ping"
        # With only tunnels open, a connection over the cap is refused.
        for s in idle:
            s.close()
        for _ in range(cap - len(tunnels)):
            s, status, _ = handshake(lb.port)
            assert status == 101
            tunnels.append(s)
        with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _ = read_response_head(s)
        assert status == 503
    finally:
        for s in tunnels + idle:
            s.close()
        set_table(ctl, replicas)


def test_bytes_after_an_accepted_handshake_go_through_once_it_is_accepted(
    fleet: tuple[LBProcess, FakeController, list[RawReplica], list[bytes]],
) -> None:
    lb, ctl, replicas, _ = fleet
    set_table(ctl, replicas)
    with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
        reader = s.makefile("rb")  # buffered: answers may share a segment
        # A plain request, a handshake behind it and the socket's first bytes, at once.
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + upgrade_request(b"/chat") + b"early")
        heads = []
        for _ in range(2):
            lines = []
            for _ in range(50):
                line = reader.readline()
                if line in (b"\r\n", b""):
                    break
                lines.append(line.strip().lower())
            heads.append(lines)
            if lines[0].startswith(b"http/1.1 200"):
                [length] = [int(x.split(b":")[1]) for x in lines if x.startswith(b"content-length")]
                assert reader.read(length) in (b"v1", b"v2")
        assert heads[0][0].startswith(b"http/1.1 200")
        assert heads[1][0].startswith(b"http/1.1 101")
        assert reader.read(5) == b"early"
