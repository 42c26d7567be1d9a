"""Replicas that break the data path on purpose, clients that notice, and the rule
that says which requests were allowed to fail.

Used by the bounded tests (tests/lb/test_data_path_faults.py) and by the long
bench command (bench/lb_faults.py), so both judge a run the same way.

``FaultReplica`` is an HTTP/1.1 server on its own asyncio loop in a thread. Each
answer names the replica, the method, the client's request id (``x-req``) and the
length and digest of the body it read, so a client can tell its own response
from anyone else's. The replica records what it processed (a request is
processed when its whole body was read: the point after which a real service
may have acted on it) and which request ids it broke. Its faults:

* ``idle_close``: closes a keep-alive connection that was idle for
  ``idle_timeout`` (jittered by ``idle_jitter``), without a word, as uvicorn,
  gunicorn and most model servers do; ``random_idle_close``: at a random moment
  of ``[0, idle_timeout]`` after each response.
* per request, with probability ``rate``: ``reset_after_head`` (reads the head,
  resets), ``close_after_head`` (reads the head, closes), ``close_mid_response``
  (processes it, sends the head and part of the body, closes), ``stall``
  (processes it and never answers), ``garbage`` (processes it and answers bytes
  that are not HTTP).

``may_fail`` is the rule, RFC 9110 9.2.2 read for a load balancer: which
requests the fault may cost, given the request and whether the replica broke it.
Everything else must succeed with its own answer, and no request of a method
that is not idempotent may be processed twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import httptools

IDLE_FAULTS = ("idle_close", "random_idle_close")
REQUEST_FAULTS = ("reset_after_head", "close_after_head", "close_mid_response", "stall", "garbage")
FAULTS = IDLE_FAULTS + REQUEST_FAULTS
# Faults after which the replica may have acted on the request: no retry is safe
# unless the method is idempotent, and none at all once the answer began.
PROCESSED_FAULTS = ("close_mid_response", "stall", "garbage")

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# What the load balancer holds of a request body for a retry (lb/retry.py HOLD_BYTES).
HOLD_BYTES = 256 * 1024


def may_fail(fault: str, method: str, body_bytes: int, broken: bool) -> bool:
    """May a request fail under ``fault``? ``broken``: the replica applied the fault
    to this very request (idle faults break connections, never a request)."""
    retriable = method in IDEMPOTENT and body_bytes <= HOLD_BYTES
    if fault in IDLE_FAULTS:
        # The replica never read it; the load balancer cannot always know that, so
        # only a request it may send twice is owed a retry.
        return not retriable
    if not broken:
        return False
    if fault in ("close_mid_response", "stall"):
        return True  # processed, and part of (or no) answer: nothing honest to retry
    return not retriable


class FaultReplica:
    """An HTTP/1.1 replica on 127.0.0.1 that applies one fault (see the module)."""

    def __init__(
        self,
        name: str,
        fault: str | None = None,
        *,
        idle_timeout: float = 5.0,
        idle_jitter: float = 0.0,
        rate: float = 1.0,
        seed: int = 0,
        keep_alive_header: str | None = None,
    ) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        self.name = name
        self.fault = fault
        self.idle_timeout = idle_timeout
        self.idle_jitter = idle_jitter
        self.rate = rate
        self.keep_alive_header = keep_alive_header
        self.rng = random.Random(seed)
        self.processed: Counter[str] = Counter()  # request id -> times processed
        self.broken: set[str] = set()  # request ids the fault was applied to
        self.connections = 0
        self.idle_closes = 0
        self.open: set[_ReplicaConn] = set()
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _start(self) -> asyncio.AbstractServer:
        return await self.loop.create_server(lambda: _ReplicaConn(self), "127.0.0.1", 0)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def idle_delay(self) -> float | None:
        """How long the next idle period may last before the replica closes it."""
        if self.fault == "random_idle_close":
            return self.rng.uniform(0.0, self.idle_timeout)
        if self.fault == "idle_close" or self.idle_timeout:
            jitter = self.idle_jitter
            return self.idle_timeout * (1 + self.rng.uniform(-jitter, jitter))
        return None

    def hits(self) -> bool:
        """Does the per-request fault apply to this request?"""
        return self.fault in REQUEST_FAULTS and self.rng.random() < self.rate

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for conn in list(self.open):
                conn.transport.abort()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    def __enter__(self) -> FaultReplica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ReplicaConn(asyncio.Protocol):
    """One connection to a FaultReplica: parse, maybe break, answer, close when idle."""

    def __init__(self, replica: FaultReplica) -> None:
        self.replica = replica
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport
        self.timer: asyncio.TimerHandle | None = None
        self.dead = False
        self._begin()

    def _begin(self) -> None:
        self.req_id = ""
        self.digest = hashlib.sha256()
        self.length = 0
        self.fault: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.replica.open.add(self)
        with self.replica._lock:
            self.replica.connections += 1
        self._idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        self.replica.open.discard(self)
        if self.timer is not None:
            self.timer.cancel()

    def data_received(self, data: bytes) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.dead:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"x-req":
            self.req_id = value.decode()

    def on_headers_complete(self) -> None:
        if self.dead:
            return
        self.method = self.parser.get_method().decode()
        self.keep = self.parser.should_keep_alive()
        if self.replica.hits():
            self.fault = self.replica.fault
            self.replica.broken.add(self.req_id)
            if self.fault == "reset_after_head":
                self._reset()
            elif self.fault == "close_after_head":
                self._close()

    def on_body(self, body: bytes) -> None:
        self.digest.update(body)
        self.length += len(body)

    def on_message_complete(self) -> None:
        if self.dead:
            return
        replica = self.replica
        with replica._lock:
            replica.processed[self.req_id] += 1
        fault = self.fault
        if fault == "stall":
            return  # never answered; the load balancer's request timeout ends it
        if fault == "garbage":
            self.transport.write(b"\x00\x01 this is not HTTP\r\n\r\n")
            return
        body = (
            f"{replica.name} {self.method} {self.req_id} {self.length} {self.digest.hexdigest()}"
        ).encode()
        head = [b"HTTP/1.1 200 OK\r\n", b"content-length: %d\r\n" % len(body)]
        if replica.keep_alive_header is not None:
            head.append(f"keep-alive: {replica.keep_alive_header}\r\n".encode())
        if not self.keep:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        if fault == "close_mid_response":
            whole = b"".join(head)
            # Half the answer: for a HEAD, whose answer is its head, half the head
            # (body bytes after it would be bytes past the end, another fault).
            part = (
                whole[: len(whole) // 2]
                if self.method == "HEAD"
                else whole + body[: len(body) // 2]
            )
            self.transport.write(part)
            self._close()
            return
        self.transport.write(b"".join(head) + (b"" if self.method == "HEAD" else body))
        if not self.keep:
            self._close()
        else:
            self._idle()

    def _idle(self) -> None:
        delay = self.replica.idle_delay()
        if delay is not None:
            self.timer = asyncio.get_running_loop().call_later(delay, self._idle_close)

    def _idle_close(self) -> None:
        self.timer = None
        with self.replica._lock:
            self.replica.idle_closes += 1
        self._close()

    def _close(self) -> None:
        self.dead = True
        self.transport.close()

    def _reset(self) -> None:
        self.dead = True
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


# -- clients ------------------------------------------------------------------------
METHODS = ("GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH")
# Body sizes: none, small (buffered whole by the LB), streamed (past the LB's
# 64 KiB request buffer) but held for a retry, and streamed past what it holds.
BODY_SIZES = (0, 1000, 100_000, HOLD_BYTES + 50_000)


@dataclass
class Sent:
    """One request a client sent, and what became of it."""

    req_id: str
    method: str
    body_bytes: int
    chunked: bool
    ok: bool = False
    error: str = ""


@dataclass
class Load:
    """What the clients send: methods, body sizes, keep-alive or not, the rhythm."""

    methods: tuple[str, ...] = METHODS
    body_sizes: tuple[int, ...] = BODY_SIZES
    keep_alive: bool = True
    clients: int = 4
    burst: tuple[int, int] = (1, 3)  # requests per burst, inclusive
    gap: tuple[float, float] = (0.07, 0.13)  # seconds between bursts
    duration: float = 2.0
    max_requests: int = 100_000
    seed: int = 1
    results: list[Sent] = field(default_factory=list)


def run_load(port: int, load: Load, timeout: float = 10.0) -> list[Sent]:
    """Run ``load.clients`` threads against 127.0.0.1:``port`` for ``load.duration``
    seconds (bounded by ``max_requests``): bursts of requests, the same gap for
    every client between bursts, so idle pooled connections age together.
    The clock starts once the load balancer answers (every worker started)."""
    warm_up(port)
    barrier = threading.Barrier(load.clients)
    stop = time.monotonic() + load.duration
    results: list[Sent] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        rng = random.Random(load.seed * 1000 + index)
        conn: http.client.HTTPConnection | None = None
        for round_no in range(load.max_requests):
            # The same gap for every client in a round: seeded by the round.
            gap = random.Random(load.seed * 100_003 + round_no).uniform(*load.gap)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout)
            if time.monotonic() >= stop:
                break
            for n in range(rng.randint(*load.burst)):
                with lock:
                    if len(results) >= load.max_requests:
                        return
                method = rng.choice(load.methods)
                size = 0 if method in ("GET", "HEAD") else rng.choice(load.body_sizes)
                sent = Sent(f"c{index}-{round_no}-{n}", method, size, rng.random() < 0.5)
                if conn is None or not load.keep_alive:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                conn = _send(conn, sent, load.keep_alive)
                with lock:
                    results.append(sent)
            time.sleep(gap)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(load.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(load.duration + 60)
    load.results = results
    return results


def warm_up(port: int, timeout: float = 15.0) -> None:
    """Wait until eight requests in a row, each on a new connection (so that the
    kernel spreads them over the load balancer's workers), are answered within
    0.2 s: a worker still starting holds its connections in the backlog."""
    deadline = time.monotonic() + timeout
    quick = 0
    while quick < 8 and time.monotonic() < deadline:
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", "/warm-up", headers={"x-req": "warm-up"})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            quick = 0
            time.sleep(0.05)
            continue
        finally:
            conn.close()
        quick = quick + 1 if time.monotonic() - t0 < 0.2 else 0


def _body(size: int, chunked: bool) -> bytes | Iterator[bytes]:
    data = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    if not chunked:
        return data
    return iter([data[i : i + 16384] for i in range(0, size, 16384)])


def _send(
    conn: http.client.HTTPConnection, sent: Sent, keep_alive: bool
) -> http.client.HTTPConnection | None:
    """Send one request and judge its answer; the connection to use next (None after
    a failure: the client opens a new one, as real clients do)."""
    headers = {"x-req": sent.req_id}
    if not keep_alive:
        headers["connection"] = "close"
    body: bytes | Iterator[bytes] | None = None
    if sent.body_bytes:
        body = _body(sent.body_bytes, sent.chunked)
        if not sent.chunked:
            headers["content-length"] = str(sent.body_bytes)
    try:
        chunked = bool(body) and sent.chunked
        conn.request(sent.method, "/x", body=body, headers=headers, encode_chunked=chunked)
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        sent.error = f"{type(exc).__name__}: {exc}"
        conn.close()
        return None
    if resp.status != 200:
        sent.error = f"{resp.status} {data[:80]!r}"
        conn.close()
        return None
    if sent.method == "HEAD":
        sent.ok = True
    else:
        expect = hashlib.sha256(
            (b"0123456789abcdef" * (sent.body_bytes // 16 + 1))[: sent.body_bytes]
        ).hexdigest()
        parts = data.decode(errors="replace").split()
        sent.ok = parts[1:] == [sent.method, sent.req_id, str(sent.body_bytes), expect]
        if not sent.ok:
            sent.error = f"someone else's answer: {data[:120]!r}"
    if not keep_alive:
        conn.close()
        return None
    return conn


@dataclass
class Verdict:
    """A run judged: requests, failures allowed and not, requests processed twice."""

    requests: int
    failed: int
    allowed: int
    unexpected: list[Sent]
    twice: list[str]

    @property
    def passed(self) -> bool:
        return not self.unexpected and not self.twice


def judge(fault: str, results: list[Sent], replicas: list[FaultReplica]) -> Verdict:
    """Hold a run to ``may_fail``: every failure must be allowed, and no request of
    a method that is not idempotent may have been processed twice."""
    broken: set[str] = set().union(*(r.broken for r in replicas))
    processed: Counter[str] = Counter()
    for r in replicas:
        processed.update(r.processed)
    failed = [s for s in results if not s.ok]
    unexpected = [
        s for s in failed if not may_fail(fault, s.method, s.body_bytes, s.req_id in broken)
    ]
    twice = [s.req_id for s in results if s.method not in IDEMPOTENT and processed[s.req_id] > 1]
    return Verdict(len(results), len(failed), len(failed) - len(unexpected), unexpected, twice)
