"""A replica scripted at the byte level, for answers no real HTTP server would send."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

Script = Callable[[socket.socket, int], None]


def read_head(sock: socket.socket, limit: int = 65536) -> bytes:
    """Read up to the end of a request head (bounded); b"" when the peer closed."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        piece = sock.recv(4096)
        if not piece:
            return b""
        data += piece
    return data


class RawReplica:
    """Accepts connections on 127.0.0.1 and runs ``script(sock, n)`` for the n-th one."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.heads: list[bytes] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._run, daemon=True)
        self._accept.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self.connections += 1
                n = self.connections
            t = threading.Thread(target=self._serve, args=(conn, n), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket, n: int) -> None:
        conn.settimeout(5.0)
        try:
            self.script(conn, n)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._accept.join(5)
        self._sock.close()
        for t in self._threads:
            t.join(6)

    def __enter__(self) -> RawReplica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def websocket_script(name: str, heads: list[bytes] | None = None) -> Script:
    """A replica that accepts every WebSocket handshake (101, ``x-replica: name``)
    and then echoes bytes until the peer closes; anything else gets 200 and close.
    ``heads`` collects the request heads it receives."""

    def script(sock: socket.socket, n: int) -> None:
        head = read_head(sock)
        if not head:
            return
        if heads is not None:
            heads.append(head)
        if b"upgrade: websocket" not in head.lower():
            body = name.encode()
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nx-replica: %s\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (body, len(body), body)
            )
            return
        sock.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nx-replica: %s\r\n\r\n"
            % name.encode()
        )
        rest = head.split(b"\r\n\r\n", 1)[1]
        if rest:
            sock.sendall(rest)
        for _ in range(1000):  # bounded: the socket's own timeout bounds each read
            piece = sock.recv(4096)
            if not piece:
                return
            sock.sendall(piece)

    return script


UPGRADE_HEAD = (
    b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s\r\n"
)


def upgrade_request(path: bytes = b"/chat", extra: bytes = b"") -> bytes:
    """A WebSocket handshake for ``path`` (``extra``: more header lines, each ending CRLF)."""
    return UPGRADE_HEAD % (path, extra)


def read_response_head(sock: socket.socket, limit: int = 65536) -> tuple[int, dict[bytes, bytes]]:
    """(status, lowercased headers) of the next response head; (0, {}) when closed first."""
    head = read_head(sock, limit)
    if not head:
        return 0, {}
    lines = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(b" ", 2)[1]), headers
