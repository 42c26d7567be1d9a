"""Slow and greedy clients must not starve a normal one (slowloris, slow bodies,
connection floods), with timeouts made short on the LB's command line."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from _lb_helpers import FakeController, LBProcess, Upstream, request, upstreams, wait_for

SLOWLORIS = b"GET / HTTP/1.1\r\nHo"
SLOW_BODY = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n!"


@contextlib.contextmanager
def open_sockets(port: int, n: int, first_bytes: bytes) -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if first_bytes:
                s.sendall(first_bytes)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def read_until_closed(s: socket.socket, timeout: float = 10.0) -> bytes:
    """What the LB sends before it closes the connection (bounded in time)."""
    s.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            piece = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not piece:
            break
        data += piece
    return data


def test_normal_client_is_served_among_200_slowloris_and_200_slow_bodies(tmp_path: Path) -> None:
    """Both replicas allow 100 requests at once: slow bodies sent to them at once
    would hold all 200 slots, and a normal GET would wait for as long as they stay."""
    with (
        upstreams(2) as (a, b),
        LBProcess(tmp_path, "--static-routes", f"{a.address},{b.address}") as lb,
    ):
        with open_sockets(lb.port, 200, SLOWLORIS), open_sockets(lb.port, 200, SLOW_BODY):
            for _ in range(20):
                status, _, body = request(lb.port, "GET", "/echo", timeout=5)
                assert status == 200, body
        assert not [r for r in a.requests + b.requests if r["path"] == "/upload"]


def test_header_and_body_timeouts_answer_408_and_close(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(
            tmp_path,
            "--static-routes",
            up.address,
            "--header-timeout",
            "0.5",
            "--body-timeout",
            "0.5",
        ) as lb,
    ):
        with (
            open_sockets(lb.port, 3, SLOWLORIS) as loris,
            open_sockets(lb.port, 3, SLOW_BODY) as bodies,
            open_sockets(lb.port, 3, b"") as silent,
        ):
            for s in loris:
                answer = read_until_closed(s)
                assert answer.startswith(b"HTTP/1.1 408 "), answer
                assert b"header timeout" in answer
            for s in bodies:
                answer = read_until_closed(s)
                assert answer.startswith(b"HTTP/1.1 408 "), answer
                assert b"body timeout" in answer
            for s in silent:
                assert read_until_closed(s) == b""
        assert up.requests == []


def test_a_body_that_keeps_coming_is_not_timed_out(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(tmp_path, "--static-routes", up.address, "--body-timeout", "0.6") as lb,
        socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s,
    ):
        s.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nConnection: close\r\n\r\n"
        )
        for byte in b"steady":  # 6 x 0.3 s: longer than the timeout, never idle that long
            s.sendall(bytes((byte,)))
            time.sleep(0.3)
        answer = read_until_closed(s)
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert up.requests[-1]["body"] == b"steady"


def test_idle_keep_alive_connection_is_closed(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(tmp_path, "--static-routes", up.address, "--idle-timeout", "0.5") as lb,
        socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s,
    ):
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_until_closed(s)
        assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_connection_cap_sheds_the_oldest_idle_connections(tmp_path: Path) -> None:
    """fd exhaustion scaled down: with max_connections 20, 20 silent connections and
    20 that sent one byte do not lock a normal client out; the oldest are closed."""
    with (
        Upstream() as up,
        LBProcess(tmp_path, "--static-routes", up.address, "--max-connections", "20") as lb,
        open_sockets(lb.port, 20, b"") as idle,
        open_sockets(lb.port, 20, b"G"),
    ):
        for _ in range(10):
            assert request(lb.port, "GET", "/echo", timeout=5)[0] == 200
        assert read_until_closed(idle[0], timeout=5) == b""  # the oldest: closed
        wait_for(lambda: "max_connections" in lb.log(), what="shedding logged")


def test_connection_cap_refuses_when_every_connection_is_busy(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(tmp_path, "--static-routes", up.address, "--max-connections", "5") as lb,
    ):
        with open_sockets(lb.port, 5, b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n") as busy:
            wait_for(lambda: len(up.requests) == 5, what="5 requests held by the replica")
            with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as extra:
                answer = read_until_closed(extra)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            up.gate.set()
            for s in busy:
                assert read_until_closed(s, timeout=0.5).startswith(b"HTTP/1.1 200 ")
        assert request(lb.port, "GET", "/echo")[0] == 200


def test_request_timeout_is_504_before_any_byte_and_a_close_after(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(tmp_path, "--static-routes", up.address, "--request-timeout", "0.5") as lb,
    ):
        status, _, body = request(lb.port, "GET", "/hold")
        assert status == 504, body
        with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
            s.sendall(b"GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = read_until_closed(s)
        assert answer.startswith(b"HTTP/1.1 200 ") and b"data: first" in answer
        assert b"second" not in answer
        up.gate.set()
        assert request(lb.port, "GET", "/echo")[0] == 200


def test_limits_from_the_route_table_apply_without_a_restart(tmp_path: Path) -> None:
    with Upstream() as up, FakeController(tmp_path) as ctl, LBProcess(tmp_path) as lb:
        key = ctl.set_table([(1, up.port)])
        wait_for(lambda: key in ctl.polls, what="first table acknowledged")
        key = ctl.set_table([(1, up.port)], extra={"load_balancer": {"header_timeout_s": 0.5}})
        wait_for(lambda: key in ctl.polls, what="limits acknowledged")
        with open_sockets(lb.port, 1, SLOWLORIS) as (s,):
            assert read_until_closed(s).startswith(b"HTTP/1.1 408 ")
        assert lb.proc.poll() is None


def test_one_byte_flood_cannot_exhaust_file_descriptors(tmp_path: Path) -> None:
    """The issue's 2 x 10,100 one-byte sockets against 20,000 descriptors, scaled
    down: 300 against an LB limited to 256 descriptors."""
    with (
        Upstream() as up,
        LBProcess(tmp_path, "--static-routes", up.address, nofile=256) as lb,
        open_sockets(lb.port, 300, b"G"),
    ):
        for _ in range(10):
            assert request(lb.port, "GET", "/echo", timeout=5)[0] == 200


def test_client_that_reads_nothing_is_disconnected_and_frees_its_slot(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(
            tmp_path, "--static-routes", up.address, "--max-ongoing", "1", "--send-timeout", "0.5"
        ) as lb,
        socket.create_connection(("127.0.0.1", lb.port), timeout=10) as greedy,
    ):
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.sendall(b"GET /big?n=200000000 HTTP/1.1\r\nHost: x\r\n\r\n")  # never read
        wait_for(lambda: "stopped reading" in lb.log(), what="greedy client disconnected")
        # The only replica slot is free again.
        assert request(lb.port, "GET", "/echo", timeout=5)[0] == 200
