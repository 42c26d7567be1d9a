"""The load balancer's request log: one JSON line per request, size-rotated.

Off by default (``service.access_log: true`` turns it on, in place). Lines are
kept in memory and written in one call when the buffer passes ``BUFFER_BYTES`` or
when the load balancer's once-a-second sweep flushes it, so a request costs one
formatted line and a list append, never a write. When the file passes
``max_bytes`` it is rotated (``access.log`` -> ``access.log.1`` -> ... up to
``backups``, the oldest dropped), so the log never holds more than
``max_bytes * (backups + 1)`` bytes on disk.

Two processes write a service's log: its load balancer and, for a service with a
route prefix, the gateway (each line says which: ``"entry"``). Both append
(``O_APPEND``, one ``write`` per flush, so lines never interleave) and both
rotate: before a write each takes the file's size from the file itself and, when
the other one rotated it away, reopens the path.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from json.encoder import encode_basestring_ascii as _quote
from pathlib import Path
from time import gmtime, strftime, time
from typing import IO, TYPE_CHECKING

from steadyserve.lb import request_id

if TYPE_CHECKING:
    from steadyserve.lb.proxy import Exchange

log = logging.getLogger("steadyserve.lb")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_AGENT_BYTES = 512

MAX_BYTES = 10 * 1024 * 1024  # per file
BACKUPS = 5  # rotated files kept besides the current one: at most 60 MiB in all
BUFFER_BYTES = 64 * 1024


class AccessLog:
    """Buffered, size-rotated JSON lines at ``path``."""

    def __init__(
        self,
        path: Path,
        max_bytes: int = MAX_BYTES,
        backups: int = BACKUPS,
        entry: str = "endpoint",
    ) -> None:
        self.path = path
        self.entry = entry
        self._tail = f',"entry":{_quote(entry)}}}'
        self.max_bytes = max_bytes
        self.backups = backups
        self._buffer: list[str] = []
        self._buffered = 0
        self._file: IO[str] | None = None
        self._size = 0
        self._second = -1
        self._second_text = ""
        self._networks: dict[tuple[str, ...], tuple[Network, ...]] = {}

    def request(
        self, ex: Exchange, version: int, replica: int, elapsed: float, sent: int, ttfb: float
    ) -> None:
        """Log one request, however it ended (the hot path, when the log is on):
        ``outcome`` says how, ``latency_ms`` and ``bytes`` are what it took and
        sent until then, ``ttfb_ms`` the time to its first body byte (null when no
        replica answered; ``ttfb`` is then negative).

        Formatted by hand rather than with ``json.dumps`` of a dict (a third of
        the cost); the method and path are the only free text and go through the
        JSON string encoder, which escapes quotes and control characters. A
        request the load balancer answered itself (no replica, or a 502/504 after
        its replica failed) also says why; one sent more than once, how often
        it was sent again (``retries``, lb/retry.py)."""
        head = ex.head
        tail = self._tail
        if ex.attempts > 1:
            tail = f',"retries":{ex.attempts - 1}' + tail
        if not replica or ex.status >= 500:
            reason = getattr(ex, "reason", None)
            if reason is not None:
                tail = f',"reason":{_quote(reason)}' + tail
            if not head:  # refused before a head was built: what the client sent
                head = getattr(ex, "received", b"") + b" "
        first = head.find(b" ") if head else -1
        second = head.find(b" ", first + 1) if first >= 0 else -1
        method = head[:first].decode("latin-1") if first > 0 else ""
        path = head[first + 1 : second].decode("latin-1") if second > first >= 0 else ""
        now = time()
        lower = head.lower()
        peer = ex.client.head.xff  # the connection's peer address (lb/request_head.py)
        trusted = ex.client.proxy.limits.trusted_proxies
        client = _client(peer, lower, head, trusted, self._networks) if trusted else peer
        agent = _header(lower, head, b"\r\nuser-agent:")
        rid = ex.request_id or request_id.made()  # refused before its head was read
        line = (
            f'{{"time":{now:.6f},"ts":"{self._iso(now)}","method":{_quote(method)},'
            f'"path":{_quote(path)},"status":{ex.status},"replica":{replica or "null"},'
            f'"version":{version or "null"},"latency_ms":{elapsed * 1000:.3f},"bytes":{sent},'
            f'"outcome":"{ex.outcome}","ttfb_ms":{f"{ttfb * 1000:.3f}" if ttfb >= 0 else "null"},'
            f'"client":{_quote(client.decode("latin-1"))},'
            f'"user_agent":{"null" if agent is None else _quote(agent.decode("latin-1"))},'
            f'"request_id":{_quote(rid.decode("latin-1"))}' + tail
        )
        self._buffer.append(line)
        self._buffered += len(line) + 1
        if self._buffered >= BUFFER_BYTES:
            self.flush()

    def _iso(self, now: float) -> str:
        """``2026-12-01T20:13:05.123Z``; the part to the second is made once a second."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._second_text = strftime("%Y-%m-%dT%H:%M:%S", gmtime(second))
        return f"{self._second_text}.{int((now - second) * 1000):03d}Z"

    def flush(self) -> None:
        """Write what is buffered; rotate first when the file is full. Never raises."""
        if not self._buffer:
            return
        data = "\n".join(self._buffer) + "\n"
        self._buffer = []
        self._buffered = 0
        try:
            if self._file is not None and self._moved():
                self._file.close()
                self._file = None
            if self._file is None:
                self._open()
            assert self._file is not None
            self._size = os.fstat(self._file.fileno()).st_size  # the other writer's lines too
            if self._size + len(data) > self.max_bytes and self._size > 0:
                self._rotate()
            assert self._file is not None
            self._file.write(data)
            self._file.flush()
            self._size += len(data)
        except OSError as exc:  # a full or read-only disk must not stop traffic
            log.warning("access log %s: %s; lines dropped", self.path, exc)

    def _moved(self) -> bool:
        """The open file is no longer at ``path`` (the other writer rotated it)."""
        assert self._file is not None
        try:
            return os.stat(self.path).st_ino != os.fstat(self._file.fileno()).st_ino
        except FileNotFoundError:
            return True

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._size = self._file.tell()

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        for n in range(self.backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            newer = self.path.with_name(f"{self.path.name}.{n - 1}") if n > 1 else self.path
            if n == self.backups:
                older.unlink(missing_ok=True)
            if newer.exists():
                newer.replace(older)
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        self._open()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


def _header(lower: bytes, head: bytes, name: bytes) -> bytes | None:
    """The value of the header ``name`` (``\r\nname:``, lower case) in ``head``, bounded."""
    at = lower.find(name)
    if at < 0:
        return None
    end = head.find(b"\r\n", at + 2)
    return head[at + len(name) : end].strip(b" \t")[:MAX_AGENT_BYTES]


def _client(
    peer: bytes,
    lower: bytes,
    head: bytes,
    trusted: tuple[str, ...],
    cache: dict[tuple[str, ...], tuple[Network, ...]],
) -> bytes:
    """Who called: the peer, or behind trusted proxies the last address of
    ``X-Forwarded-For`` (which ends with the peer, lb/downstream.py appends it)
    that is not one of them, as nginx's ``real_ip_recursive`` finds it."""
    networks = cache.get(trusted)
    if networks is None:
        networks = cache[trusted] = tuple(ipaddress.ip_network(c, strict=False) for c in trusted)

    def is_trusted(address: bytes) -> bool:
        try:
            ip = ipaddress.ip_address(address.decode("latin-1"))
        except ValueError:
            return False
        return any(ip in net for net in networks)

    if not is_trusted(peer):
        return peer
    chain = _header(lower, head, b"\r\nx-forwarded-for:")
    if chain is None:
        return peer
    hops = [hop.strip() for hop in chain.split(b",") if hop.strip()]
    for hop in reversed(hops):
        if not is_trusted(hop):
            return hop
    return hops[0] if hops else peer
