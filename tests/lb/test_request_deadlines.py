"""request_timeout_s through the one deadline timer the proxy keeps for every
request in flight (lb/exchange.py Deadlines): several requests due together all
time out, and a lowered timeout applies to the next request even while an earlier
one waits on a longer deadline."""

from __future__ import annotations

import socket
from pathlib import Path

from _lb_helpers import FakeController, LBProcess, Upstream, request, wait_for

HOLD = b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"


def status_of(s: socket.socket) -> bytes:
    s.settimeout(10)
    return s.recv(65536).split(b"\r\n", 1)[0]


def test_requests_due_together_all_time_out(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(tmp_path, "--static-routes", up.address, "--request-timeout", "0.5") as lb,
    ):
        socks = [socket.create_connection(("127.0.0.1", lb.port), timeout=10) for _ in range(3)]
        try:
            for s in socks:
                s.sendall(HOLD)
            assert [status_of(s) for s in socks] == [b"HTTP/1.1 504 Gateway Timeout"] * 3
        finally:
            for s in socks:
                s.close()
        up.gate.set()
        assert request(lb.port, "GET", "/echo")[0] == 200


def test_a_lowered_timeout_applies_while_a_longer_deadline_is_pending(tmp_path: Path) -> None:
    with Upstream() as up, FakeController(tmp_path) as ctl, LBProcess(tmp_path) as lb:
        key = ctl.set_table([(1, up.port)], extra={"request_timeout_s": 60})
        wait_for(lambda: key in ctl.polls, what="table with a 60 s timeout acknowledged")
        with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as first:
            first.sendall(HOLD)  # due in 60 s: the deadline timer is armed for then
            wait_for(lambda: len(up.requests) == 1, what="the first request held")
            key = ctl.set_table([(1, up.port)], extra={"request_timeout_s": 0.5})
            wait_for(lambda: key in ctl.polls, what="table with a 0.5 s timeout acknowledged")
            # Due first although sent later: answered 504 now, not in 60 s (the
            # helper gives up after 10 s).
            assert request(lb.port, "GET", "/hold")[0] == 504
            up.gate.set()
            assert status_of(first) == b"HTTP/1.1 200 OK"
