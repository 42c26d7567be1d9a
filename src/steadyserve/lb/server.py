"""Run one service's load balancer: listen, follow the routes, report, drain on stop.

Kept apart from ``__main__`` so tests and benchmarks can run a load balancer
inside their own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadyserve.home.paths import Home
from steadyserve.lb.balancer import Balancer
from steadyserve.lb.downstream import ClientConnection
from steadyserve.lb.observe import Observability
from steadyserve.lb.preview import Preview
from steadyserve.lb.proxy import SEND_TIMEOUT, Proxy
from steadyserve.lb.replica_metrics import Scraper
from steadyserve.lb.route_client import LoadReporter, RouteClient
from steadyserve.lb.shared_load import REFRESH_S, SharedLoad, refresh, share
from steadyserve.lb.tls import server_context_from_env
from steadyserve.lb.websocket import WebSockets
from steadyserve.lb.zero import ZeroHold, controller_asker
from steadyserve.wire.routes import Limits, RouteTable

log = logging.getLogger("steadyserve.lb")

DRAIN_SECONDS = 10.0
SWEEP_SECONDS = 1.0
FIRST_TABLE_WAIT_S = 5.0
DRAIN_IDLE_GRACE_S = 0.5  # busy keep-alive clients get a "connection: close" response first


@dataclass(frozen=True)
class LBConfig:
    """Everything ``python -m steadyserve.lb`` accepts."""

    service: str
    port: int
    home: Path
    host: str = "127.0.0.1"
    static_routes: str | None = None
    policy: str = "least_load"
    max_ongoing: int = 100
    max_queued: int = -1
    max_header_bytes: int = 65536
    max_body_bytes: int = 100 * 1024 * 1024
    report_interval: float = 0.5
    poll_wait: float = 25.0
    drain_seconds: float = DRAIN_SECONDS
    # Inherited, already listening sockets (a worker may accept on several); and with
    # workers (lb/workers.py), their count and a worker's supervisor pid (its reports
    # name the supervisor as the LB, and itself as the worker).
    listen_fds: tuple[int, ...] = ()
    workers: int = 1
    worker_of: int | None = None
    shared_load: tuple[int, int, int] | None = None  # fd, this worker's index, workers
    # Client-facing limits until the controller's table says otherwise.
    limits: Limits = field(default_factory=Limits)
    send_timeout: float = SEND_TIMEOUT
    metrics_port: int = 0  # loopback port of the LB's own /metrics (0: any free one)
    access_log: Path | None = None  # log every request here, whatever the table says


def open_file_limit() -> int:
    """RLIMIT_NOFILE, raised to the hard limit first: it bounds max_connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class LoadBalancer:
    """The proxy plus its control-plane loops, started and stopped together."""

    def __init__(self, config: LBConfig) -> None:
        self.config = config
        table = None
        if config.static_routes is not None:
            table = RouteTable.static(
                config.static_routes, config.policy, config.max_ongoing, config.max_queued
            )
        self.balancer = Balancer(table, config.policy, config.max_ongoing, config.max_queued)
        self.proxy = Proxy(
            config.service,
            self.balancer,
            max_header_bytes=config.max_header_bytes,
            max_body_bytes=config.max_body_bytes,
            limits=config.limits,
            fd_limit=open_file_limit(),
            send_timeout=config.send_timeout,
        )
        self.home = Home.from_env(config.home)
        self._first_table = asyncio.Event()
        self.route_client = RouteClient(
            self.home,
            config.service,
            self._apply_table,
            wait_s=config.poll_wait,
            worker=str(os.getpid()),
        )
        # Autoscaling hooks: the queue length goes with the per-replica counts, and
        # requests that arrive at zero replicas are held (lb/zero.py).
        self.observe = Observability(self.proxy, self.home, config)
        self.reporter = LoadReporter(
            self.home, config.service, self._load_snapshot, config.report_interval
        )
        self.proxy.websockets = WebSockets(self.proxy)
        self.shared: SharedLoad | None = None
        self.scraper: Scraper | None = None
        if config.shared_load is not None:
            fd, index, workers = config.shared_load
            self.shared = SharedLoad(fd, workers, index)
            share(self.balancer, self.shared)
        if config.static_routes is None:
            self.proxy.zero = ZeroHold(self.proxy, controller_asker(self.home, config.service))
        self.preview = Preview(self.proxy, config.host)  # blue-green preview_port
        self._server: asyncio.AbstractServer | None = None
        self._extra: list[asyncio.AbstractServer] = []  # more inherited sockets
        self.port = config.port  # the bound port once started (useful with port 0)
        self._tasks: list[asyncio.Task[None]] = []

    def _load_snapshot(self) -> dict[str, Any]:
        snapshot = {**self.observe.snapshot(), "queued": len(self.proxy.waiting)}
        snapshot["worker"] = str(os.getpid())
        if self.config.worker_of is not None:
            snapshot["lb_pid"] = self.config.worker_of  # the LB process the controller knows
        return snapshot

    def _apply_table(self, table: RouteTable) -> None:
        self.proxy.apply_table(table)
        if self.shared is not None:
            share(self.balancer, self.shared)  # a new policy decides on shared counts too
        if self.proxy.websockets is not None:
            self.proxy.websockets.apply_table(table)
        self.observe.apply_table(table)
        self.preview.apply(table.preview)  # the blue-green preview port
        self._first_table.set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.static_routes is None:
            self._tasks.append(loop.create_task(self.route_client.run()))
            self._tasks.append(loop.create_task(self.reporter.run()))
            if self.config.listen_fds:
                # A restarted LB would answer 503 until its first table: let clients
                # wait in the shared socket's backlog for it instead (bounded).
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._first_table.wait(), FIRST_TABLE_WAIT_S)
        # service.tls -> the endpoint speaks HTTPS (lb/tls.py).
        tls = server_context_from_env()
        if self.config.listen_fds:
            # Sockets the controller bound and keeps open too: connections that
            # arrive while this process restarts wait in their backlogs, not refused.
            for fd in self.config.listen_fds[1:]:
                self._extra.append(
                    await loop.create_server(
                        lambda: ClientConnection(self.proxy),
                        sock=socket.socket(fileno=fd),
                        backlog=4096,
                        ssl=tls,
                    )
                )
            sock = socket.socket(fileno=self.config.listen_fds[0])
            self._server = await loop.create_server(
                lambda: ClientConnection(self.proxy), sock=sock, backlog=4096, ssl=tls
            )
        else:
            self._server = await loop.create_server(
                lambda: ClientConnection(self.proxy),
                self.config.host,
                self.config.port,
                reuse_address=True,
                backlog=4096,
                ssl=tls,
            )
        # uvloop's Server has .sockets like asyncio's; typeshed only knows AbstractServer.
        sockets = getattr(self._server, "sockets", None) or ()
        self.port = int(sockets[0].getsockname()[1]) if sockets else self.config.port
        self._tasks.append(loop.create_task(self._sweep()))
        if self.shared is not None:
            self._tasks.append(loop.create_task(self._share(self.shared)))
        if self.shared is None or self.shared.index == 0:
            # One scraper per service (replica_metrics.py): this process or worker 0.
            publish = self.shared.publish_queue if self.shared is not None else None
            self.scraper = Scraper(self.balancer, publish)
            self._tasks.append(loop.create_task(self.scraper.run()))
        await self.observe.start()

    async def _share(self, shared: SharedLoad) -> None:
        """Publish this worker's counts (releases included); a slot freed by another
        worker may let requests queued here go."""
        while True:
            busy = refresh(self.balancer, shared)
            if self.proxy.waiting:
                self.proxy._wake()
                busy = True
            await asyncio.sleep(REFRESH_S if busy else 0.1)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.proxy.sweep()
            self.observe.sweep()

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), then close everything."""
        if self._server is not None:
            self._server.close()
        for server in self._extra:
            server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_seconds
        # Draining marks every response "connection: close"; a keep-alive client
        # busy sending gets one within moments and leaves cleanly, where closing
        # its idle connection at once could cross its next request on the wire.
        self.proxy.draining = True
        grace = loop.time() + DRAIN_IDLE_GRACE_S
        while loop.time() < grace and self.proxy.clients:
            await asyncio.sleep(0.02)
        self.proxy.begin_drain()
        websockets = self.proxy.websockets
        if websockets is not None:
            websockets.stop(max(0.0, deadline - loop.time() - 1.0))
        tunnels = websockets.tunnels if websockets is not None else set()
        while (self.proxy.clients or tunnels) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        if self.proxy.clients:
            log.warning("%d client connections still open after drain", len(self.proxy.clients))
        if self.config.static_routes is None:
            # One last report so the controller sees the final counts.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.reporter.report_once(), 1.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if websockets is not None:
            websockets.close_all()
        await self.preview.stop()
        self.proxy.close_all()
        await self.observe.stop()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
