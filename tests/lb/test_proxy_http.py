"""HTTP semantics through a real LB subprocess over http.server upstreams."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _lb_helpers import LBProcess, Upstream, raw_exchange, read_responses, request


def _echo(port: int, method: str, body: bytes | None = None, **headers: str) -> dict[str, object]:
    status, _, data = request(port, method, "/echo?x=1", body=body, headers=headers)
    assert status == 200, data
    result: dict[str, object] = json.loads(data)
    return result


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_every_method_reaches_the_replica(shared_lb: LBProcess, method: str) -> None:
    body = b"payload" if method in ("POST", "PUT", "PATCH") else None
    echo = _echo(shared_lb.port, method, body)
    assert echo["method"] == method
    assert echo["path"] == "/echo?x=1"
    assert echo["body_len"] == (len(body) if body else 0)


def test_content_length_body_is_forwarded_intact(shared_lb: LBProcess) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    echo = _echo(shared_lb.port, "POST", body)
    assert echo["body_len"] == len(body)
    assert echo["body_sha"] == hashlib.sha256(body).hexdigest()


def test_chunked_request_body_is_streamed(shared_lb: LBProcess) -> None:
    pieces = [b"a" * 10, b"b" * 70000, b"c"]
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for p in pieces:
            s.sendall(b"%x\r\n%s\r\n" % (len(p), p))
        s.sendall(b"0\r\n\r\n")
        resp = http.client.HTTPResponse(s)
        resp.begin()
        echo = json.loads(resp.read())
    body = b"".join(pieces)
    assert echo["body_len"] == len(body)
    assert echo["body_sha"] == hashlib.sha256(body).hexdigest()
    assert "chunked" in echo["headers"]["transfer-encoding"]


def test_chunked_response_arrives_whole(shared_lb: LBProcess) -> None:
    status, headers, body = request(shared_lb.port, "GET", "/chunked")
    assert status == 200
    assert body == b"one-two-three"
    assert headers["transfer-encoding"] == "chunked"


def test_until_close_response_is_rechunked_for_http11(shared_lb: LBProcess) -> None:
    # Two requests on one connection: the LB re-frames the until-close body.
    conn = http.client.HTTPConnection("127.0.0.1", shared_lb.port, timeout=10)
    try:
        conn.request("GET", "/close")
        r1 = conn.getresponse()
        assert r1.read() == b"until-close body"
        assert r1.getheader("transfer-encoding") == "chunked"
        conn.request("GET", "/echo")
        r2 = conn.getresponse()
        assert r2.status == 200
        json.loads(r2.read())
    finally:
        conn.close()


def test_until_close_response_to_http10_client(shared_lb: LBProcess) -> None:
    data = raw_exchange(shared_lb.port, b"GET /close HTTP/1.0\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"chunked" not in head.lower()
    assert body == b"until-close body"


def test_large_response_streams_through(shared_lb: LBProcess) -> None:
    n = 8 * 1024 * 1024
    status, _, body = request(shared_lb.port, "GET", f"/big?n={n}", timeout=30)
    assert status == 200
    assert len(body) == n


def test_keep_alive_on_both_sides(
    two_upstreams: tuple[Upstream, Upstream], shared_lb: LBProcess
) -> None:
    before = sum(u.connections for u in two_upstreams)
    conn = http.client.HTTPConnection("127.0.0.1", shared_lb.port, timeout=10)
    try:
        for _ in range(20):
            conn.request("GET", "/echo")
            resp = conn.getresponse()
            assert resp.status == 200
            resp.read()
            assert not resp.will_close
    finally:
        conn.close()
    # 20 requests spread over two replicas reuse pooled connections.
    assert sum(u.connections for u in two_upstreams) - before <= 4


def test_sequential_requests_spread_over_replicas(shared_lb: LBProcess) -> None:
    seen = {_echo(shared_lb.port, "GET")["upstream"] for _ in range(6)}
    assert seen == {"up1", "up2"}


def test_connection_close_is_honoured(shared_lb: LBProcess) -> None:
    data = raw_exchange(
        shared_lb.port, b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    head = data.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 200")
    assert b"connection: close" in head  # and raw_exchange returned: the LB closed


def test_http10_closes_unless_keep_alive(shared_lb: LBProcess) -> None:
    data = raw_exchange(shared_lb.port, b"GET /echo HTTP/1.0\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200")
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        for _ in range(2):
            s.sendall(b"GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            resp = http.client.HTTPResponse(s)
            resp.begin()
            assert resp.status == 200
            assert resp.getheader("connection") == "keep-alive"
            resp.read()


def test_head_response_has_no_body_and_connection_stays_usable(shared_lb: LBProcess) -> None:
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        for _ in range(3):  # several times: the pooled replica connection must survive
            s.sendall(b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            resp = http.client.HTTPResponse(s, method="HEAD")
            resp.begin()
            assert resp.status == 200
            assert int(resp.getheader("content-length") or 0) > 0
            assert resp.read() == b""
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            resp = http.client.HTTPResponse(s)
            resp.begin()
            assert json.loads(resp.read())["method"] == "GET"


def test_expect_100_continue_is_forwarded(shared_lb: LBProcess) -> None:
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        s.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        interim = b""
        while b"\r\n\r\n" not in interim:
            piece = s.recv(1)
            assert piece, "connection closed before 100 Continue"
            interim += piece
        assert interim.startswith(b"HTTP/1.1 100")
        s.sendall(b"hello")
        resp = http.client.HTTPResponse(s)
        resp.begin()
        assert resp.status == 200
        assert json.loads(resp.read())["body_len"] == 5


def test_hop_by_hop_headers_dropped_and_forwarded_for_added(shared_lb: LBProcess) -> None:
    echo = _echo(
        shared_lb.port,
        "GET",
        **{
            "Connection": "keep-alive, X-Private",
            "X-Private": "secret",
            "Keep-Alive": "timeout=5",
            "X-Custom": "kept",
        },
    )
    headers = echo["headers"]
    assert isinstance(headers, dict)
    assert headers["x-custom"] == "kept"
    assert "x-private" not in headers
    assert "keep-alive" not in headers
    assert headers.get("connection", "").lower() in ("", "keep-alive")
    assert headers["x-forwarded-for"] == "127.0.0.1"
    echo = _echo(shared_lb.port, "GET", **{"X-Forwarded-For": "10.1.2.3"})
    assert echo["headers"]["x-forwarded-for"] == "10.1.2.3, 127.0.0.1"  # type: ignore[index]


def test_sse_events_arrive_one_by_one(
    two_upstreams: tuple[Upstream, Upstream], shared_lb: LBProcess
) -> None:
    for u in two_upstreams:
        u.gate.clear()
    try:
        with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
            s.sendall(b"GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
            received = b""
            while b"data: first" not in received:
                piece = s.recv(65536)
                assert piece, "stream ended before the first event"
                received += piece
            assert b"data: second" not in received
            for u in two_upstreams:  # release only after the first event was seen
                u.gate.set()
            deadline = time.monotonic() + 10
            while not received.endswith(b"0\r\n\r\n") and time.monotonic() < deadline:
                piece = s.recv(65536)
                if not piece:
                    break
                received += piece
            assert b"data: second" in received
    finally:
        for u in two_upstreams:
            u.gate.set()


def test_replica_status_codes_pass_through(shared_lb: LBProcess) -> None:
    for code in (201, 204, 304, 404, 500, 503):
        status, _, body = request(shared_lb.port, "GET", f"/status/{code}")
        assert status == code
        if code in (204, 304):
            assert body == b""


def test_pipelined_requests_are_answered_in_order(shared_lb: LBProcess) -> None:
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        s.sendall(
            b"GET /echo?n=1 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /echo?n=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /echo?n=3 HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        responses = read_responses(s, ["GET", "POST", "GET"])
        paths = [json.loads(r.body)["path"] for r in responses]  # type: ignore[attr-defined]
        assert paths == ["/echo?n=1", "/echo?n=2", "/echo?n=3"]


def test_request_body_is_streamed_before_it_is_complete(tmp_path: Path) -> None:
    """The replica sees the first part of a body larger than the LB buffers (64 KiB)
    while the client still holds the rest."""
    first_part_seen = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def replica() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            data = b""
            while b"first-part" not in data:
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            first_part_seen.set()
            while not data.endswith(b"0\r\n\r\n"):
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    thread = threading.Thread(target=replica, daemon=True)
    thread.start()
    try:
        with (
            LBProcess(tmp_path, "--static-routes", f"127.0.0.1:{port}") as lb,
            socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s,
        ):
            first = b"x" * 70000 + b"first-part"
            s.sendall(
                b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"%x\r\n%s\r\n" % (len(first), first)
            )
            assert first_part_seen.wait(10), "the body was held back"
            s.sendall(b"b\r\nsecond-part\r\n0\r\n\r\n")
            resp = http.client.HTTPResponse(s)
            resp.begin()
            assert resp.status == 200 and resp.read() == b"ok"
    finally:
        listener.close()
        thread.join(10)


def test_bad_arguments_exit_2_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "steadyserve.lb",
            "--service",
            "s",
            "--port",
            "0",
            "--home",
            str(tmp_path),
            "--static-routes",
            "nonsense",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "--static-routes" in proc.stderr and "Traceback" not in proc.stderr


def test_expect_100_continue_is_answered_by_the_lb(shared_lb: LBProcess) -> None:
    """The LB reads a body before choosing a replica, so it sends 100 Continue
    itself; the replica never sees the Expect header."""
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        s.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
        )
        interim = b""
        while b"\r\n\r\n" not in interim and len(interim) < 1000:
            piece = s.recv(1000)
            assert piece
            interim += piece
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(b"body")
        (resp,) = read_responses(s, ["POST"])
        assert resp.status == 200
        echoed = json.loads(resp.body)  # type: ignore[attr-defined]
        assert echoed["body_len"] == 4 and "expect" not in echoed["headers"]
