"""A replica that breaks HTTP framing must never leak bytes into other responses."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from _lb_helpers import LBProcess, raw_exchange, read_responses

from tests.hostile._raw import RawReplica, read_head

SMUGGLED = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!"


def read_for(sock: socket.socket, seconds: float) -> bytes:
    """Everything the peer sends within ``seconds`` (bounded)."""
    sock.settimeout(0.1)
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            continue
        if not piece:
            break
        data += piece
    return data


def overlong(sock: socket.socket, n: int) -> None:
    """Answer the first request with ``hi`` plus the start of a smuggled response,
    the rest of it half a second later; answer every later request honestly."""
    while True:
        head = read_head(sock)
        if not head:
            return
        if b"/smuggle" in head:
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi" + SMUGGLED[:28])
            time.sleep(0.5)
            sock.sendall(SMUGGLED[28:])
        else:
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhonest")


def test_bytes_past_a_response_reach_no_client(tmp_path: Path) -> None:
    with (
        RawReplica(overlong) as replica,
        LBProcess(tmp_path, "--static-routes", replica.address) as lb,
    ):
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as a:
                a.sendall(b"GET /smuggle HTTP/1.1\r\nHost: x\r\n\r\n")
                # Long enough for the replica's late bytes to arrive at the LB too.
                first = read_for(a, 0.8)
                assert first.endswith(b"\r\n\r\nhi"), first
                a.settimeout(10)
                a.sendall(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
                (second,) = read_responses(a, ["GET"])
                assert second.body == b"honest"  # type: ignore[attr-defined]
            b = raw_exchange(lb.port, b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert b.endswith(b"\r\n\r\nhonest"), b
            assert b"EVIL" not in b


def test_extra_bytes_in_the_same_read_are_not_forwarded(tmp_path: Path) -> None:
    def eager(sock: socket.socket, n: int) -> None:
        while read_head(sock):
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi" + SMUGGLED)

    with (
        RawReplica(eager) as replica,
        LBProcess(tmp_path, "--static-routes", replica.address) as lb,
    ):
        for _ in range(3):
            answer = raw_exchange(
                lb.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            assert answer.endswith(b"\r\n\r\nhi"), answer
        assert replica.connections >= 3, "a connection with leftover bytes was reused"


def test_malformed_chunk_before_any_byte_is_a_clean_502(tmp_path: Path) -> None:
    def bad_chunks(sock: socket.socket, n: int) -> None:
        if read_head(sock):
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nnot hex\r\n0\r\n\r\n"
            )

    with (
        RawReplica(bad_chunks) as replica,
        LBProcess(tmp_path, "--static-routes", replica.address) as lb,
    ):
        for method in (b"GET", b"POST"):
            answer = raw_exchange(
                lb.port,
                b"%s / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                % method,
            )
            assert answer.startswith(b"HTTP/1.1 502 "), answer
