"""Test helpers: scriptable upstream replicas, the LB as a subprocess, a fake controller.

Everything listens on 127.0.0.1 with ports chosen by the kernel; every helper is a
context manager (or has ``close``) so tests never leave processes or threads behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import io
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

GATE_TIMEOUT = 10.0


def read_request_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request body, framed by Content-Length or chunked encoding."""
    te = handler.headers.get("Transfer-Encoding", "")
    if "chunked" in te.lower():
        parts = []
        while True:
            size_line = handler.rfile.readline()
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
        return b"".join(parts)
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


class Upstream:
    """A replica made of http.server threads, scripted by request path.

    Paths: /echo (JSON of method, path, headers, body digest), /chunked, /close
    (body until close), /sse (first event, then waits for ``gate``), /ssedie (first
    event, then at ``gate`` a reset), /hold (waits for ``gate``), /die (closes the
    connection with a reset, no response),
    /halfdie (reset after part of the body), /big?n=BYTES, /status/CODE.
    HEAD works on all of them. ``die=True`` answers every path like /die.
    """

    def __init__(self, name: str = "up", die: bool = False) -> None:
        self.name = name
        self.die = die  # answer every request like /die
        self.gate = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self.closed_connections = 0  # connections whose handler finished (peer closed)
        self.disconnects = 0
        self.arrived = threading.Event()  # set whenever a request arrives
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with upstream._lock:
                    upstream.connections += 1

            def finish(self) -> None:
                with contextlib.suppress(OSError):
                    super().finish()
                with upstream._lock:
                    upstream.closed_connections += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                upstream._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = read_request_body(h)
        record = {
            "method": h.command,
            "path": h.path,
            "headers": {k.lower(): v for k, v in h.headers.items()},
            "body": body,
            "upstream": self.name,
        }
        with self._lock:
            self.requests.append(record)
        self.arrived.set()
        path = "/die" if self.die else h.path.split("?")[0]
        head = h.command == "HEAD"
        try:
            if path == "/echo":
                payload = json.dumps(
                    {
                        "method": h.command,
                        "path": h.path,
                        "headers": record["headers"],
                        "body_len": len(body),
                        "body_sha": hashlib.sha256(body).hexdigest(),
                        "upstream": self.name,
                    }
                ).encode()
                self._send(h, 200, payload, head, {"Content-Type": "application/json"})
            elif path == "/chunked":
                h.send_response(200)
                h.send_header("Transfer-Encoding", "chunked")
                h.send_header("X-Upstream", self.name)
                h.end_headers()
                if not head:
                    for piece in (b"one-", b"two-", b"three"):
                        h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    h.wfile.write(b"0\r\n\r\n")
            elif path == "/close":
                h.wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                if not head:
                    h.wfile.write(b"until-close body")
                h.close_connection = True
            elif path == "/sse":
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream")
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                event = b"data: first\n\n"
                h.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                h.wfile.flush()
                self.gate.wait(GATE_TIMEOUT)
                event = b"data: second\n\n"
                h.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
            elif path == "/ssedie":  # the first event, then (at ``gate``) a reset mid-stream
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream")
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                event = b"data: first\n\n"
                h.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                h.wfile.flush()
                self.gate.wait(GATE_TIMEOUT)
                sock = h.connection
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
                h.close_connection = True
            elif path == "/hold":
                self.gate.wait(GATE_TIMEOUT)
                self._send(h, 200, b"held " + self.name.encode(), head)
            elif path == "/die":
                sock = h.connection
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
                h.close_connection = True
            elif path == "/halfdie":
                h.send_response(200)
                h.send_header("Content-Length", "100000")
                h.end_headers()
                h.wfile.write(b"y" * 1000)
                h.wfile.flush()
                sock = h.connection
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
                h.close_connection = True
            elif path == "/big":
                n = int(h.path.split("n=")[1]) if "n=" in h.path else 1 << 20
                h.send_response(200)
                h.send_header("Content-Length", str(n))
                h.end_headers()
                if not head:
                    block = b"x" * 65536
                    sent = 0
                    while sent < n:
                        piece = block[: min(len(block), n - sent)]
                        h.wfile.write(piece)
                        sent += len(piece)
            elif path.startswith("/status/"):
                self._send(h, int(path.rsplit("/", 1)[1]), b"status", head)
            else:
                self._send(h, 404, b"not found", head)
        except OSError:
            with self._lock:
                self.disconnects += 1
            h.close_connection = True

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        head: bool,
        headers: dict[str, str] | None = None,
    ) -> None:
        if status in (204, 304):
            body = b""  # these never carry a body (RFC 9110 15.3.5, 15.4.5)
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        if status != 204:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _limit_files(n: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


class LBProcess:
    """``python -m steadyserve.lb`` as a subprocess; stopped (SIGTERM, then kill) on close."""

    def __init__(
        self, home: Path, *args: str, service: str = "svc", nofile: int | None = None
    ) -> None:
        """``nofile``: run the LB with that RLIMIT_NOFILE (soft and hard)."""
        self.log_path = home / f"lb-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "steadyserve.lb",
                "--service",
                service,
                "--port",
                "0",
                "--home",
                str(home),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            preexec_fn=None if nofile is None else (lambda: _limit_files(nofile)),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            self.close()
            raise RuntimeError(f"LB did not start: {line!r}\n{self.log()}")
        self.port = int(line.split("http://127.0.0.1:")[1].split()[0])

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=5)

    def close(self) -> None:
        self.stop()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def __enter__(self) -> LBProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: (status, lowercased headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


class _SharedFile:
    """Lets several http.client.HTTPResponse read one socket through one buffer."""

    class _Reader(io.BufferedReader):
        def close(self) -> None:  # each response "closes" it; the socket lives on
            pass

    def __init__(self, sock: socket.socket) -> None:
        self._fp = self._Reader(sock.makefile("rb", buffering=0))  # type: ignore[arg-type]

    def makefile(self, *args: Any, **kwargs: Any) -> Any:
        return self._fp


def read_responses(sock: socket.socket, methods: list[str]) -> list[http.client.HTTPResponse]:
    """Read one response per method (pipelined answers may arrive in one segment)."""
    shared = _SharedFile(sock)
    responses = []
    for method in methods:
        resp = http.client.HTTPResponse(shared, method=method)  # type: ignore[arg-type]
        resp.begin()
        resp.body = resp.read()  # type: ignore[attr-defined]
        responses.append(resp)
    return responses


def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes, read until the LB closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                piece = s.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            chunks.append(piece)
        return b"".join(chunks)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or predicate}")


class FakeController:
    """The controller's two LB endpoints on aiohttp, in a background thread.

    ``set_table`` changes the table (bumping its version) and wakes held polls;
    ``polls`` records each poll's ``known``; ``reports`` each report body.
    """

    def __init__(self, home: Path, service: str = "svc", epoch: str = "e1") -> None:
        self.home = home
        self.service = service
        self.epoch = epoch
        self.version = 0
        self.table: dict[str, Any] = {}
        self.polls: list[str] = []
        self.reports: list[dict[str, Any]] = []
        self.wakes = 0  # POSTs to .../wake (a request held at zero replicas)
        self.gateway_routes: dict[str, str] = {}  # route prefix -> service, for a gateway
        self.fail = False  # answer 500 to polls
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Event | None = None
        self._runner: Any = None
        self.port = 0
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._call(self._start())
        self.set_table([])

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        from aiohttp import web

        self._changed = asyncio.Event()
        app = web.Application()
        app.router.add_get("/api/v1/lb/{service}/routes", self._routes)
        app.router.add_post("/api/v1/lb/{service}/report", self._report)
        app.router.add_post("/api/v1/lb/{service}/wake", self._wake)
        app.router.add_get("/api/v1/gateway/routes", self._gateway_routes)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.write_controller_file()

    def write_controller_file(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "controller.json").write_text(
            json.dumps({"pid": os.getpid(), "url": f"http://127.0.0.1:{self.port}"})
        )

    def set_table(
        self,
        addresses: list[tuple[int, int]],
        max_ongoing: int = 100,
        max_queued: int = -1,
        policy: str = "least_load",
        blocked_paths: list[str] | None = None,
        extra: dict[str, Any] | None = None,
        versions: dict[int, int] | None = None,
    ) -> str:
        """Replicas as (id, port); returns the new ``epoch:version``.

        ``extra`` adds fields to the table (e.g. the load balancer's limits);
        ``versions`` maps replica ids to their version (1 when not listed)."""

        def apply() -> None:
            self.version += 1
            self.table = {
                "epoch": self.epoch,
                "version": self.version,
                "policy": policy,
                "max_ongoing_requests": max_ongoing,
                "max_queued_requests": max_queued,
                "replicas": [
                    {
                        "id": rid,
                        "version": (versions or {}).get(rid, 1),
                        "host": "127.0.0.1",
                        "port": port,
                    }
                    for rid, port in addresses
                ],
                **({"blocked_paths": blocked_paths} if blocked_paths is not None else {}),
                **(extra or {}),
            }
            assert self._changed is not None
            self._changed.set()
            self._changed = asyncio.Event()

        key = f"{self.epoch}:{self.version + 1}"
        self._loop.call_soon_threadsafe(apply)
        wait_for(lambda: f"{self.epoch}:{self.version}" == key, 5, "table applied")
        return key

    async def _routes(self, request: Any) -> Any:
        from aiohttp import web

        assert request.match_info["service"] == self.service
        known = request.query.get("known", "")
        self.polls.append(known)
        if self.fail:
            return web.Response(status=500, text="failing on purpose")
        wait = float(request.query.get("wait", "25"))
        current = f"{self.epoch}:{self.version}"
        if known == current:
            assert self._changed is not None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
        return web.json_response(self.table)

    async def _gateway_routes(self, request: Any) -> Any:
        """The gateway's map (set ``gateway_routes`` before starting one); a poll
        that already knows it is held until the controller stops."""
        from aiohttp import web

        key = f"{self.epoch}:1"
        if request.query.get("known") == key:
            assert self._changed is not None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), float(request.query.get("wait", "25")))
        return web.json_response({"epoch": self.epoch, "version": 1, "routes": self.gateway_routes})

    async def _stop(self) -> None:
        assert self._changed is not None
        self._changed.set()  # release held polls so the server can stop at once
        await self._runner.cleanup()

    async def _wake(self, request: Any) -> Any:
        from aiohttp import web

        self.wakes += 1
        return web.json_response({"target_replicas": 1})

    async def _report(self, request: Any) -> Any:
        from aiohttp import web

        self.reports.append(await request.json())
        return web.Response(text="ok")

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._runner is not None:
            self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> FakeController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GatewayProcess(LBProcess):
    """``python -m steadyserve.lb.gateway_server`` on a free port, as a subprocess."""

    def __init__(self, home: Path) -> None:
        self.log_path = home / f"gateway-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "steadyserve.lb.gateway_server",
                *("--home", str(home), "--port", str(self.port)),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            self.close()
            raise RuntimeError(f"gateway did not start: {line!r}\n{self.log()}")


@contextlib.contextmanager
def upstreams(n: int) -> Iterator[list[Upstream]]:
    ups = [Upstream(f"up{i + 1}") for i in range(n)]
    try:
        yield ups
    finally:
        for u in ups:
            u.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
