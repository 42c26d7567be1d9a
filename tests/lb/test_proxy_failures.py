"""Failures, limits, queueing and shutdown, through a real LB subprocess."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _lb_helpers import (
    FakeController,
    LBProcess,
    Upstream,
    free_port,
    raw_exchange,
    request,
    upstreams,
    wait_for,
)

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_no_replica_in_table_is_503_at_once(tmp_path: Path) -> None:
    with FakeController(tmp_path) as ctl, LBProcess(tmp_path) as lb:
        wait_for(lambda: len(ctl.polls) >= 2, what="LB polled and acknowledged")
        t0 = time.monotonic()
        status, _, body = request(lb.port, "GET", "/")
        assert status == 503
        assert body.decode().strip() == "no ready replica for service 'svc': it is unavailable"
        assert time.monotonic() - t0 < 5


def test_refused_connection_is_retried_elsewhere_and_replica_ejected(tmp_path: Path) -> None:
    dead = free_port()
    with (
        Upstream("good") as good,
        LBProcess(tmp_path, "--static-routes", f"127.0.0.1:{dead},{good.address}") as lb,
    ):
        for method in ("GET", "POST", "GET", "POST", "GET", "GET"):
            status, _, body = request(
                lb.port, method, "/echo", body=b"x" if method == "POST" else None
            )
            assert status == 200, body
        assert len(good.requests) == 6
        # Ejected after its first refusal: the sequential requests above (well
        # under a second) tried the dead replica only once.
        assert lb.log().count("refused a connection") == 1


def test_sent_idempotent_request_is_retried_when_replica_dies(tmp_path: Path) -> None:
    with (
        Upstream("dying", die=True) as dying,
        Upstream("good") as good,
        LBProcess(tmp_path, "--static-routes", f"{dying.address},{good.address}") as lb,
    ):
        for method in ("GET", "HEAD", "OPTIONS", "GET"):
            status, _, _ = request(lb.port, method, "/echo")
            assert status == 200
        assert dying.requests, "the dying replica was never tried"
        # A POST that reached the dying replica is not replayed: 502.
        statuses = [request(lb.port, "POST", "/echo", body=b"once")[0] for _ in range(4)]
        assert 502 in statuses and 200 in statuses
        post_bodies = [r for r in dying.requests if r["method"] == "POST"]
        assert len(post_bodies) == statuses.count(502)


def test_response_broken_mid_body_closes_the_client_connection(shared_lb: LBProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", shared_lb.port, timeout=10)
    try:
        conn.request("GET", "/halfdie")
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
    finally:
        conn.close()


def test_replica_error_before_response_is_502_for_post(tmp_path: Path) -> None:
    with (
        Upstream("dying", die=True) as dying,
        LBProcess(tmp_path, "--static-routes", dying.address) as lb,
    ):
        status, _, body = request(lb.port, "POST", "/x", body=b"data")
        assert status == 502
        assert b"failed" in body
        status, _, _ = request(lb.port, "GET", "/x")  # retried, but nowhere else to go
        assert status == 502


def test_full_replicas_queue_fifo_then_503(tmp_path: Path) -> None:
    with (
        Upstream("slow") as up,
        LBProcess(
            tmp_path, "--static-routes", up.address, "--max-ongoing", "1", "--max-queued", "1"
        ) as lb,
    ):
        results: dict[str, int] = {}

        def call(name: str) -> None:
            results[name] = request(lb.port, "GET", f"/hold?{name}", timeout=15)[0]

        first = threading.Thread(target=call, args=("first",))
        first.start()
        wait_for(lambda: len(up.requests) == 1, what="first request at the replica")
        second = threading.Thread(target=call, args=("second",))
        second.start()
        time.sleep(0.2)  # let the second one queue; it must not reach the replica
        assert len(up.requests) == 1
        status, _, body = request(lb.port, "GET", "/hold?third")
        assert status == 503 and b"queue full" in body
        up.gate.set()
        first.join(15)
        second.join(15)
        assert results == {"first": 200, "second": 200}
        assert [r["path"] for r in up.requests] == ["/hold?first", "/hold?second"]


def test_limits_431_413_400(tmp_path: Path) -> None:
    with (
        Upstream() as up,
        LBProcess(
            tmp_path,
            "--static-routes",
            up.address,
            "--max-header-bytes",
            "2048",
            "--max-body-bytes",
            "1000",
        ) as lb,
    ):
        big = "v" * 4000
        data = raw_exchange(lb.port, f"GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n".encode())
        assert data.startswith(b"HTTP/1.1 431")
        # A head arriving in pieces is bounded too.
        with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nX-Big: ")
            for _ in range(4):
                s.sendall(b"v" * 1000)
                time.sleep(0.01)
            assert s.recv(100).startswith(b"HTTP/1.1 431")
        data = raw_exchange(lb.port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 413")
        chunk = b"%x\r\n%s\r\n" % (600, b"z" * 600)
        data = raw_exchange(
            lb.port,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 2,
        )
        assert data.startswith(b"HTTP/1.1 413")
        data = raw_exchange(lb.port, b"GARBAGE\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 400")
        data = raw_exchange(lb.port, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 400")
        # The LB still serves after all that.
        assert request(lb.port, "GET", "/echo")[0] == 200


def test_client_disconnects_close_the_replica_connection_and_free_slots(tmp_path: Path) -> None:
    with (
        upstreams(1) as (up,),
        FakeController(tmp_path) as ctl,
        LBProcess(tmp_path, "--report-interval", "0.1") as lb,
    ):
        ctl.set_table([(7, up.port)])
        wait_for(lambda: ctl.polls.count(f"{ctl.epoch}:{ctl.version}") >= 1, what="table acked")
        # Mid-response: the client leaves an SSE stream after its first event.
        with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
            s.sendall(b"GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
            received = b""
            while b"data: first" not in received:
                piece = s.recv(4096)
                assert piece
                received += piece
            wait_for(
                lambda: bool(ctl.reports) and ctl.reports[-1]["inflight"].get("7") == 1,
                what="in-flight 1 reported",
            )
        wait_for(lambda: ctl.reports[-1]["inflight"].get("7") == 0, what="in-flight back to 0")
        # Mid-request: a body that never finishes is buffered by the LB, never sent
        # to the replica, so it never holds a replica slot.
        with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
            sent_at = len(ctl.reports)
            wait_for(lambda: len(ctl.reports) > sent_at + 2, what="reports while the body waits")
            assert ctl.reports[-1]["inflight"].get("7") == 0
        up.gate.set()  # the SSE handler writes again, then finds its connection closed
        # The SSE replica connection was closed by the LB, not pooled: its handler ends.
        wait_for(lambda: up.closed_connections >= 1, what="replica connection closed")
        report = ctl.reports[-1]
        assert report["requests"]["7"] == 1
        assert [r["path"] for r in up.requests] == ["/sse"]
        assert report["table"] == f"{ctl.epoch}:{ctl.version}"
        assert report["lb_pid"] == lb.proc.pid
        # The LB still answers on fresh connections.
        assert request(lb.port, "GET", "/echo")[0] == 200


def test_sigterm_lets_inflight_requests_finish_and_exits_0(tmp_path: Path) -> None:
    with Upstream() as up:
        lb = LBProcess(tmp_path, "--static-routes", up.address)
        try:
            result: list[int] = []
            t = threading.Thread(
                target=lambda: result.append(request(lb.port, "GET", "/hold", timeout=15)[0])
            )
            t.start()
            wait_for(lambda: len(up.requests) == 1, what="request at the replica")
            lb.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with pytest.raises(OSError):  # no longer accepting
                socket.create_connection(("127.0.0.1", lb.port), timeout=2).close()
            up.gate.set()
            t.join(15)
            assert result == [200]
            assert lb.proc.wait(timeout=15) == 0
        finally:
            lb.close()


def _hello(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(BENCH / "hello_replica.py"), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def test_replica_sigkilled_under_get_load_costs_no_failed_get(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    replicas = [_hello(p) for p in ports]
    try:
        for r in replicas:
            assert r.stdout is not None and b"listening" in r.stdout.readline()
        with LBProcess(
            tmp_path, "--static-routes", ",".join(f"127.0.0.1:{p}" for p in ports)
        ) as lb:
            done = [0]
            failures: list[str] = []
            lock = threading.Lock()
            deadline = time.monotonic() + 20

            def load() -> None:
                conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=10)
                for _ in range(300):
                    if time.monotonic() > deadline:
                        break
                    try:
                        conn.request("GET", "/")
                        resp = conn.getresponse()
                        body = resp.read()
                        if resp.status != 200 or body != b"hello":
                            failures.append(f"{resp.status} {body!r}")
                    except (OSError, http.client.HTTPException) as exc:
                        failures.append(repr(exc))
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=10)
                    with lock:
                        done[0] += 1
                conn.close()

            threads = [threading.Thread(target=load) for _ in range(8)]
            for t in threads:
                t.start()
            wait_for(lambda: done[0] >= 600, timeout=20, what="load under way")
            replicas[0].kill()
            for t in threads:
                t.join(30)
            assert done[0] == 8 * 300
            assert failures == []
    finally:
        for r in replicas:
            r.kill()
            r.wait(5)
            if r.stdout is not None:
                r.stdout.close()
