"""Upgrades other than WebSocket are declined and served as plain HTTP/1.1.

``curl --http2 http://...`` and Java's HttpClient ask for ``h2c`` on their first
request, with a body when they have one. nginx answers such requests over
HTTP/1.1 (RFC 9110 7.8 lets a server ignore Upgrade); the load balancer used to
answer 501. Each case here failed with 501 before lb/declined_upgrade.py.
"""

from __future__ import annotations

import hashlib
import json
import socket

from _lb_helpers import LBProcess, raw_exchange, read_responses

H2C = (
    b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
)
BODY = b"hello, declined upgrade"


def h2c_post(body: bytes = BODY) -> bytes:
    return b"POST /echo HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s" % (
        H2C,
        len(body),
        body,
    )


def h2c_chunked(body: bytes = BODY) -> bytes:
    half = len(body) // 2
    chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        half,
        body[:half],
        len(body) - half,
        body[half:],
    )
    return b"POST /echo HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked\r\n\r\n%s" % (
        H2C,
        chunks,
    )


H2C_GET = b"GET /echo HTTP/1.1\r\nHost: x\r\n" + H2C + b"\r\n"
PLAIN_GET = b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"


def echoed(data: bytes) -> dict[str, object]:
    result: dict[str, object] = json.loads(data)
    return result


def test_h2c_requests_with_and_without_bodies_are_served_as_http11(shared_lb: LBProcess) -> None:
    """One connection, pipelined in one write: an h2c GET, POST (Content-Length),
    POST (chunked), then a plain GET; each answered in order, bodies intact, and
    no upgrade header reaches the replica."""
    sha = hashlib.sha256(BODY).hexdigest()
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        s.sendall(H2C_GET + h2c_post() + h2c_chunked() + PLAIN_GET)
        responses = read_responses(s, ["GET", "POST", "POST", "GET"])
    assert [r.status for r in responses] == [200, 200, 200, 200]
    answers = [echoed(r.body) for r in responses]  # type: ignore[attr-defined]
    assert [a["method"] for a in answers] == ["GET", "POST", "POST", "GET"]
    assert [a["body_sha"] for a in answers[1:3]] == [sha, sha]
    for answer in answers:
        headers = answer["headers"]
        assert isinstance(headers, dict)
        assert "upgrade" not in headers and "http2-settings" not in headers, headers


def test_a_declined_upgrade_body_may_arrive_in_later_reads(shared_lb: LBProcess) -> None:
    request = h2c_post()
    head, _, body = request.partition(b"\r\n\r\n")
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=10) as s:
        s.sendall(head + b"\r\n\r\n")
        for i in range(0, len(body), 5):  # the body in small pieces, after the head
            s.sendall(body[i : i + 5])
        s.sendall(PLAIN_GET)
        first, second = read_responses(s, ["POST", "GET"])
    assert echoed(first.body)["body_sha"] == hashlib.sha256(BODY).hexdigest()  # type: ignore[attr-defined]
    assert second.status == 200


def test_many_declined_upgrades_in_one_write_are_all_answered(shared_lb: LBProcess) -> None:
    """Each declined head restarts parsing; 200 of them in one write must neither
    recurse nor stall."""
    count = 200
    with socket.create_connection(("127.0.0.1", shared_lb.port), timeout=20) as s:
        s.sendall(H2C_GET * count)
        responses = read_responses(s, ["GET"] * count)
    assert all(r.status == 200 for r in responses)


def test_connect_and_http2_request_lines_get_one_line_answers(shared_lb: LBProcess) -> None:
    connect = raw_exchange(shared_lb.port, b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n")
    assert connect.startswith(b"HTTP/1.1 501 ")
    assert connect.endswith(b"CONNECT is not supported: this is not a forward proxy\n")
    http2 = raw_exchange(shared_lb.port, b"GET /echo HTTP/2.0\r\nHost: x\r\n\r\n")
    assert http2.startswith(b"HTTP/1.1 505 ")
    assert http2.endswith(b"HTTP/2.0 is not supported here\n")
