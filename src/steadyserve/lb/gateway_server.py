"""``python -m steadyserve.lb.gateway_server``: the gateway port as its own process.

It follows two things from the controller, both by long-poll: the gateway map
(route prefix -> service, ``/api/v1/gateway/routes``) and, for each service on
it, that service's route table, polled and reported as consumer ``gateway`` so
the controller's draining waits for this process too before it stops a replica
(zero failed requests during updates, through either port).

Each lane counts its service's requests in its own :class:`LBMetrics`, as the
service's load balancer does, and its load report carries them (entry
"gateway"): the controller's ``/metrics``, dashboard and canary analysis see
traffic through this port like traffic through the endpoint. The lane follows
its table's ``access_log`` too, writing to the service's request log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from steadyserve.home.paths import Home
from steadyserve.lb import control_http
from steadyserve.lb.balancer import Balancer
from steadyserve.lb.downstream import ClientConnection
from steadyserve.lb.gateway import GatewayProxy, LaneProxy
from steadyserve.lb.metrics import LBMetrics, live_report
from steadyserve.lb.observe import access_log_path, follow_access_log
from steadyserve.lb.route_client import LoadReporter, RouteClient
from steadyserve.lb.server import open_file_limit
from steadyserve.lb.zero import ZeroHold, controller_asker
from steadyserve.wire.counts import GATEWAY
from steadyserve.wire.routes import RouteTable, service_url

log = logging.getLogger("steadyserve.lb")

CONSUMER = "gateway"
DRAIN_SECONDS = 10.0
SWEEP_SECONDS = 1.0
POLL_WAIT_S = 25.0
FIRST_ROUTES_WAIT_S = 10.0
"""How long a starting gateway waits for its map and its lanes' first replica tables
before it serves anyway (connections wait meanwhile in the port's backlog)."""


class _GatewayRouteClient(RouteClient):
    """A service's route table, polled as consumer ``gateway``."""

    async def poll_once(self) -> RouteTable:
        url = self._home.controller_url()
        if url is None:
            raise control_http.ControlHTTPError("no controller recorded in STEADY_HOME")
        target = (
            service_url(url, self._service, "routes")
            + f"?known={quote(self.known, safe=':')}&wait={int(self._wait_s)}&consumer={CONSUMER}"
        )
        status, body = await control_http.request(
            target, timeout=self._wait_s + 10.0, home=self._home
        )
        if status != 200:
            raise control_http.ControlHTTPError(f"routes poll answered {status}")
        return RouteTable.from_json(json.loads(body))


class _GatewayReporter(LoadReporter):
    consumer = CONSUMER


class Lane:
    """One service on the gateway: its own proxy, route poll and load report.

    ``metrics`` outlive the lane: a service taken off the map and put back keeps
    counting where it was, so the controller never sees its counters go down
    while this process runs."""

    def __init__(self, home: Home, service: str, gateway: GatewayProxy, metrics: LBMetrics) -> None:
        self.service = service
        self.proxy = LaneProxy(
            service,
            Balancer(None),
            max_header_bytes=gateway.max_header_bytes,
            max_body_bytes=gateway.max_body_bytes,
            limits=gateway.default_limits,
            send_timeout=gateway.send_timeout,
        )
        self.proxy.metrics = metrics
        self.proxy.set_gateway_timeout(gateway.request_timeout_s)
        self.proxy.zero = ZeroHold(self.proxy, controller_asker(home, service))
        self.access_log = access_log_path(home, service)
        self.tabled = asyncio.Event()  # set once its first replica table is applied
        self.client = _GatewayRouteClient(home, service, self.apply_table, POLL_WAIT_S)
        self.reporter = _GatewayReporter(home, service, self._snapshot, 0.5)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self.client.run()), loop.create_task(self.reporter.run())]

    def apply_table(self, table: RouteTable) -> None:
        self.proxy.apply_table(table)
        follow_access_log(self.proxy.metrics, table.access_log, self.access_log, GATEWAY)
        self.tabled.set()

    def _snapshot(self) -> dict[str, Any]:
        return {
            **self.proxy.balancer.snapshot(),
            "queued": len(self.proxy.waiting),
            "metrics": live_report(self.proxy, entry=GATEWAY),
        }

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()


class Gateway:
    """The gateway's proxy plus one lane per service on its map."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.proxy = GatewayProxy(fd_limit=open_file_limit())
        self.lanes: dict[str, Lane] = {}
        self.metrics: dict[str, LBMetrics] = {}  # per service, kept across its lanes
        self.known = ""
        self.mapped = asyncio.Event()  # set once the first route map is applied
        self._tasks: list[asyncio.Task[None]] = []
        self._server: asyncio.AbstractServer | None = None
        self._more: list[asyncio.AbstractServer] = []

    def apply_map(
        self,
        routes: dict[str, str],
        models: dict[str, str] | None = None,
        apps: dict[str, str] | None = None,
        request_timeout_s: float | None = None,
    ) -> None:
        """Route prefix -> service and model -> service: add lanes for new services,
        retire the rest; ``apps`` (prefix -> application) is what ``/-/routes`` shows,
        ``request_timeout_s`` the gateway's own (Ray's ``http_options``)."""
        models = models or {}
        self.proxy.request_timeout_s = request_timeout_s
        for lane in self.lanes.values():
            lane.proxy.set_gateway_timeout(request_timeout_s)
        wanted = set(routes.values()) | set(models.values())
        for name in wanted - set(self.lanes):
            metrics = self.metrics.setdefault(name, LBMetrics())
            self.lanes[name] = Lane(self.home, name, self.proxy, metrics)
        for name in set(self.lanes) - wanted:
            lane = self.lanes.pop(name)
            lane.proxy.begin_drain()
            # In-flight requests on it still finish; its polls stop now and its
            # pooled replica connections close once a drain's time has passed.
            lane.cancel()
            asyncio.get_running_loop().call_later(DRAIN_SECONDS, self._retired, lane)
        self.proxy.set_lanes(
            {prefix.encode(): self.lanes[name].proxy for prefix, name in routes.items()},
            {model.encode(): self.lanes[name].proxy for model, name in models.items()},
        )
        self.proxy.set_apps(apps or {})
        log.info("gateway routes: %s; models: %s", routes or "(none)", models or "(none)")

    def _retired(self, lane: Lane) -> None:
        lane.proxy.close_all()
        if lane.service not in self.lanes:  # not put back on the map meanwhile
            follow_access_log(lane.proxy.metrics, False, lane.access_log, GATEWAY)

    async def follow_map(self) -> None:
        backoff = 0.2
        while True:
            url = self.home.controller_url()
            try:
                if url is None:
                    raise control_http.ControlHTTPError("no controller")
                target = (
                    f"{url.rstrip('/')}/api/v1/gateway/routes"
                    f"?known={quote(self.known, safe=':')}&wait={int(POLL_WAIT_S)}"
                )
                status, body = await control_http.request(
                    target, timeout=POLL_WAIT_S + 10.0, home=self.home
                )
                if status != 200:
                    raise control_http.ControlHTTPError(f"gateway poll answered {status}")
                data = json.loads(body)
                routes = data.get("routes")
                models = data.get("models") or {}
                apps = data.get("apps") or {}
                timeout = data.get("request_timeout_s")
                if not all(isinstance(m, dict) for m in (routes, models, apps)):
                    raise ValueError("routes, models and apps must be mappings")
                if timeout is not None and (
                    isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                ):
                    raise ValueError("request_timeout_s must be a number")
            except (control_http.ControlHTTPError, ValueError) as exc:
                log.debug("gateway poll failed: %s", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.2
            key = f"{data.get('epoch')}:{data.get('version')}"
            if key != self.known:
                self.apply_map(
                    {str(k): str(v) for k, v in routes.items()},
                    {str(k): str(v) for k, v in models.items()},
                    {str(k): str(v) for k, v in apps.items()},
                    None if timeout is None else float(timeout),
                )
                self.known = key
            self.mapped.set()

    async def first_routes(self, timeout: float) -> bool:
        """Until the first route map and each of its lanes' first replica tables are
        applied (False if ``timeout`` passed first). A gateway that served before
        would answer its first requests 404 (no lanes yet) or 503 (a lane with no
        replicas yet) for a route whose replicas are ready."""

        async def routed() -> None:
            await self.mapped.wait()
            for lane in list(self.lanes.values()):
                await lane.tabled.wait()

        try:
            await asyncio.wait_for(routed(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def start(self, listen_fds: list[int], host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.follow_map()))
        self._tasks.append(loop.create_task(self._sweep()))
        if not await self.first_routes(FIRST_ROUTES_WAIT_S):
            log.warning(
                "no route map from the controller within %gs: serving without it",
                FIRST_ROUTES_WAIT_S,
            )
        if listen_fds:
            # 127.0.0.1 and, when the controller could bind it, ::1.
            for fd in listen_fds:
                server = await loop.create_server(
                    lambda: ClientConnection(self.proxy),
                    sock=socket.socket(fileno=fd),
                    backlog=4096,
                )
                if self._server is None:
                    self._server = server
                else:
                    self._more.append(server)
        else:
            self._server = await loop.create_server(
                lambda: ClientConnection(self.proxy), host, port, reuse_address=True, backlog=4096
            )

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.proxy.sweep()
            for metrics in self.metrics.values():
                if metrics.access_log is not None:
                    metrics.access_log.flush()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for server in self._more:
            server.close()
        self.proxy.begin_drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_SECONDS
        while self.proxy.clients and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for lane in self.lanes.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(lane.reporter.report_once(), 1.0)
            lane.cancel()
        for task in self._tasks:
            task.cancel()
        self.proxy.close_all()
        for metrics in self.metrics.values():
            if metrics.access_log is not None:
                metrics.access_log.close()


async def serve(home: Home, listen_fds: list[int], host: str, port: int) -> None:
    gateway = Gateway(home)
    await gateway.start(listen_fds, host, port)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"steady-gateway: listening on port {port} (pid {os.getpid()})", flush=True)
    await stop.wait()
    await gateway.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m steadyserve.lb.gateway_server")
    p.add_argument("--home", required=True)
    p.add_argument("--port", required=True, type=int)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--listen-fd", type=int, action="append", default=[])
    args = p.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("STEADY_LB_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s gateway[%(process)d] %(message)s",
        stream=sys.stderr,
    )
    import uvloop

    try:
        uvloop.run(serve(Home.from_env(Path(args.home)), args.listen_fd, args.host, args.port))
    except OSError as exc:
        print(f"steady-gateway: cannot listen on port {args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
