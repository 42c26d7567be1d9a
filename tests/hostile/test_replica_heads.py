"""A replica that answers with an enormous response head: the load balancer
refuses to pass it on (502, with a log line naming why), as nginx does past
``proxy_buffer_size``, instead of streaming an unbounded head to the client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _lb_helpers import LBProcess, request


class HeadReplica:
    """Answers every request with a ``header_bytes``-byte header, then ``ok``."""

    def __init__(self, header_bytes: int) -> None:
        self.header = b"X-Big: " + b"a" * header_bytes + b"\r\n"
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    if b"\r\n\r\n" not in conn.recv(65536):
                        continue
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\n"
                        + self.header
                        + b"Content-Length: 2\r\nConnection: close\r\n\r\nok"
                    )
                except OSError:
                    continue

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def replicas() -> Iterator[tuple[HeadReplica, HeadReplica]]:
    big, small = HeadReplica(200 * 1024), HeadReplica(60 * 1024)
    yield big, small
    big.close()
    small.close()


def test_a_200_kb_response_head_is_a_502_and_a_60_kb_one_passes(
    tmp_path: Path, replicas: tuple[HeadReplica, HeadReplica]
) -> None:
    big, small = replicas
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with LBProcess(tmp_path / "a", "--static-routes", f"127.0.0.1:{big.port}") as lb:
        status, headers, body = request(lb.port, "POST", "/", body=b"x")
        assert status == 502, (status, len(headers.get("x-big", "")))
        assert "x-big" not in headers
        assert "response head larger than 64 KiB" in lb.log()
    with LBProcess(tmp_path / "b", "--static-routes", f"127.0.0.1:{small.port}") as lb:
        status, headers, body = request(lb.port, "POST", "/", body=b"x")
        assert status == 200 and body == b"ok" and len(headers["x-big"]) == 60 * 1024
