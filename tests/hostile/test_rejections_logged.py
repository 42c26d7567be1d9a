"""Requests the load balancer refuses show up in the access log: what was
received (method and target, bounded and escaped) and a ``reason``. An attack
must be visible, and must not be able to break the log."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lb_helpers import FakeController, LBProcess, Upstream, raw_exchange, wait_for

LONG = b"/" + b"a" * 5000


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LBProcess, Path]]:
    home = tmp_path_factory.mktemp("home")
    log = home / "access.log"
    with Upstream("up") as up, FakeController(home) as ctl:
        key = ctl.set_table(
            [(1, up.port)],
            blocked_paths=["/-/reconfigure"],
            extra={"load_balancer": {"header_timeout_s": 0.5}},
        )
        args = ("--access-log", str(log), "--max-body-bytes", "1000", "--max-header-bytes", "2048")
        with LBProcess(home, *args) as lb:
            wait_for(lambda: key in ctl.polls, what="table acknowledged")
            yield lb, log


def lines(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    text = log.read_bytes()
    assert all(b >= 0x20 for b in text.replace(b"\n", b"")), "a raw control byte in the log"
    return [json.loads(line) for line in text.decode().splitlines()]


def wait_for_line(log: Path, **fields: object) -> dict[str, Any]:
    """The log line with these fields (lines are flushed about once a second)."""
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = [e for e in lines(log) if all(e.get(k) == v for k, v in fields.items())]
        return bool(found)

    wait_for(seen, timeout=10, what=f"a line with {fields}")
    return found[-1]


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("data", "status", "reason", "method", "path"),
    [
        (
            b"GET /p?x=1 HTTP/1.1\r\nHost: x\r\nX-Steady-Version: 1_0\r\n\r\n",
            400,
            "bad_version_pin",
            "GET",
            "/p?x=1",
        ),
        (
            b"POST /-/%72econfigure HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
            404,
            "blocked_path",
            "POST",
            "/-/%72econfigure",
        ),
        (
            b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
            413,
            "body_too_large",
            "POST",
            "/big",
        ),
        (
            b"GET /h HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 3000 + b"\r\n\r\n",
            431,
            "headers_too_large",
            "GET",
            "/h",
        ),
        (b"GET /two HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, "bad_host", "GET", "/two"),
        (
            b'GET /a"b\x01c HTTP/1.1\r\nHost: x\r\n\r\n',
            400,
            "malformed",
            "GET",
            '/a"b\x01c',
        ),
        (b'G"\x01T / HTTP/1.1\r\nHost: x\r\n\r\n', 400, "malformed", 'G"\x01T', "/"),
        (
            b"GET " + LONG + b" HTTP/1.1\r\nHost: x\r\nX-Steady-Version: +2\r\n\r\n",
            400,
            "bad_version_pin",
            "GET",
            LONG[:512].decode(),
        ),
    ],
)
def test_a_refused_request_is_logged_with_what_was_received_and_why(
    logged: tuple[LBProcess, Path],
    data: bytes,
    status: int,
    reason: str,
    method: str,
    path: str,
) -> None:
    lb, log = logged
    assert status_of(raw_exchange(lb.port, data)) == status
    entry = wait_for_line(log, status=status, method=method, path=path)
    assert entry["reason"] == reason
    assert entry["replica"] is None


def test_a_header_timeout_is_logged(logged: tuple[LBProcess, Path]) -> None:
    lb, log = logged
    with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
        s.sendall(b"GET /slow HTTP/1.1\r\nHo")
        assert s.recv(4096).startswith(b"HTTP/1.1 408 ")
    entry = wait_for_line(log, status=408, method="GET", path="/slow")
    assert entry["reason"] == "header_timeout"


def test_a_served_request_has_no_reason(logged: tuple[LBProcess, Path]) -> None:
    lb, log = logged
    request = b"GET /served HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert status_of(raw_exchange(lb.port, request)) == 404  # the replica's own 404
    entry = wait_for_line(log, path="/served")
    assert "reason" not in entry and entry["replica"] == 1
