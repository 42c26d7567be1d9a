"""The routing table and the loops that keep the load balancer in step with the controller.

The table is an immutable value: the proxy swaps whole tables, so a request never
sees half an update. ``RouteClient`` long-polls the controller for new tables and
keeps the last one whenever the controller is unreachable (the load balancer is a
separate process precisely so that a controller restart never stops traffic); it
re-reads the controller's address from ``STEADY_HOME`` on every attempt because a
restarted controller listens on a new port. ``LoadReporter`` posts per-replica
in-flight and request counts back for the controller's draining and autoscaling.
Both are off the hot path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from steadyserve.lb import control_http
from steadyserve.lb.policies import POLICIES
from steadyserve.paths import Home

log = logging.getLogger("steadyserve.lb")

STATIC_EPOCH = "static"


@dataclass(frozen=True)
class ReplicaRoute:
    """One routable replica: where to connect and which version it runs."""

    id: int
    version: int
    host: str
    port: int


@dataclass(frozen=True)
class Limits:
    """How long the load balancer waits for clients and replicas, and how many
    client connections it holds (``service.load_balancer`` and
    ``service.request_timeout_s``; docs/load-balancer.md explains the defaults)."""

    header_timeout_s: float = 20.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 75.0
    max_connections: int = 10000
    request_timeout_s: float | None = None

    @classmethod
    def from_json(cls, block: Any, request_timeout: Any) -> Limits:
        if not isinstance(block, dict):
            raise ValueError("route table: load_balancer must be an object")
        unknown = set(block) - {
            "header_timeout_s",
            "body_timeout_s",
            "idle_timeout_s",
            "max_connections",
            "workers",  # lbscale: how many LB processes run; the controller's business
        }
        if unknown:
            raise ValueError(f"route table: unknown load_balancer field {sorted(unknown)[0]!r}")
        defaults = cls()
        values: dict[str, Any] = {}
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            value = block.get(name, getattr(defaults, name))
            if not _positive_number(value):
                raise ValueError(f"route table: load_balancer.{name} must be a number > 0")
            values[name] = float(value)
        connections = block.get("max_connections", defaults.max_connections)
        if not isinstance(connections, int) or isinstance(connections, bool) or connections < 1:
            raise ValueError("route table: load_balancer.max_connections must be an int > 0")
        if request_timeout is not None and not _positive_number(request_timeout):
            raise ValueError("route table: request_timeout_s must be a number > 0 or null")
        return cls(
            max_connections=connections,
            request_timeout_s=None if request_timeout is None else float(request_timeout),
            **values,
        )


def _hold_at_zero(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError("route table: hold_at_zero_s must be a number >= 0")
    return float(value)


def _websocket_drain(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError("route table: websocket_drain_s must be a number >= 0")
    return float(value)


def _weights(value: Any) -> tuple[tuple[int, int], ...]:
    """``{"version": percent}``; None or {} is no weights (all versions alike)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ValueError("route table: weights must map versions to percents")
    out = []
    for key, percent in value.items():
        try:
            version = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"route table: weights key {key!r} is not a version") from None
        if not isinstance(percent, int) or isinstance(percent, bool) or not 0 <= percent <= 100:
            raise ValueError(f"route table: weights[{key}] must be an int 0-100")
        out.append((version, percent))
    return tuple(sorted(out))


def _preview(value: Any) -> tuple[int, int] | None:
    """``{"port": P, "version": V}`` or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("route table: preview must be an object or null")
    port = _int_field(value, "port", "preview.")
    version = _int_field(value, "version", "preview.")
    if not 0 < port < 65536:
        raise ValueError("route table: preview.port must be a port number")
    return port, version


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class RouteTable:
    """Everything the controller tells a load balancer, as one versioned value."""

    epoch: str
    version: int
    policy: str
    max_ongoing_requests: int
    max_queued_requests: int
    replicas: tuple[ReplicaRoute, ...]
    # Paths the LB refuses (404): a command replica's reconfigure_path is a control
    # endpoint on the user port, and clients must never reach it.
    blocked_paths: frozenset[bytes] = frozenset()
    # The client-facing limits; None keeps the load balancer's own (command line).
    limits: Limits | None = None
    # Scale to zero (lb/zero.py): hold requests this long while no replica is listed.
    hold_at_zero_s: float = 0.0
    access_log: bool = False  # service.access_log: one JSON line per request
    # lbscale: how long a WebSocket to a replica that left the table stays open.
    websocket_drain_s: float = 10.0
    # Progressive delivery: percent of traffic per version (a canary). Empty: every
    # routable replica alike, whatever its version (as without a canary).
    weights: tuple[tuple[int, int], ...] = ()
    # Blue-green preview: (port, version) the LB also listens on, for that version only.
    preview: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        """``epoch:version``: what the LB acknowledges in ``known=`` and reports."""
        return f"{self.epoch}:{self.version}"

    @classmethod
    def from_json(cls, data: Any) -> RouteTable:
        """Validate the controller's JSON; ValueError says which field is wrong."""
        if not isinstance(data, dict):
            raise ValueError("route table: expected a JSON object")
        epoch = _field(data, "epoch", str)
        version = _int_field(data, "version")
        policy = _field(data, "policy", str)
        if policy not in POLICIES:
            raise ValueError(f"route table: unknown policy {policy!r}")
        max_ongoing = _int_field(data, "max_ongoing_requests")
        max_queued = _int_field(data, "max_queued_requests")
        raw_replicas = _field(data, "replicas", list)
        replicas = []
        for i, item in enumerate(raw_replicas):
            if not isinstance(item, dict):
                raise ValueError(f"route table: replicas[{i}] is not an object")
            replicas.append(
                ReplicaRoute(
                    id=_int_field(item, "id", f"replicas[{i}]."),
                    version=_int_field(item, "version", f"replicas[{i}]."),
                    host=_field(item, "host", str, f"replicas[{i}]."),
                    port=_int_field(item, "port", f"replicas[{i}]."),
                )
            )
        blocked = data.get("blocked_paths") or []
        if not isinstance(blocked, list) or not all(isinstance(p, str) for p in blocked):
            raise ValueError("route table: blocked_paths must be a list of paths")
        limits = None
        if "load_balancer" in data or data.get("request_timeout_s") is not None:
            block = data.get("load_balancer")
            limits = Limits.from_json({} if block is None else block, data.get("request_timeout_s"))
        if not isinstance(data.get("access_log", False), bool):
            raise ValueError("route table: access_log must be a bool")
        return cls(
            epoch,
            version,
            policy,
            max_ongoing,
            max_queued,
            tuple(replicas),
            frozenset(p.encode() for p in blocked),
            limits,
            _hold_at_zero(data.get("hold_at_zero_s", 0)),
            data.get("access_log", False),
            _websocket_drain(data.get("websocket_drain_s", 10.0)),
            _weights(data.get("weights")),
            _preview(data.get("preview")),
        )

    @classmethod
    def static(
        cls, addresses: str, policy: str, max_ongoing_requests: int, max_queued_requests: int
    ) -> RouteTable:
        """The fixed table of ``--static-routes host:port,host:port`` (ids 1..n)."""
        replicas = []
        for i, item in enumerate(a.strip() for a in addresses.split(",") if a.strip()):
            host, sep, port = item.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"--static-routes: {item!r} is not host:port")
            replicas.append(ReplicaRoute(id=i + 1, version=1, host=host, port=int(port)))
        if not replicas:
            raise ValueError("--static-routes: no address given")
        return cls(
            STATIC_EPOCH, 1, policy, max_ongoing_requests, max_queued_requests, tuple(replicas)
        )


def _field(data: dict[str, Any], name: str, kind: type, prefix: str = "") -> Any:
    value = data.get(name)
    if not isinstance(value, kind):
        raise ValueError(f"route table: {prefix}{name} must be a {kind.__name__}")
    return value


def _int_field(data: dict[str, Any], name: str, prefix: str = "") -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"route table: {prefix}{name} must be an int")
    return value


def service_url(controller_url: str, service: str, endpoint: str) -> str:
    """``{controller}/api/v1/lb/{service}/{endpoint}``."""
    return f"{controller_url.rstrip('/')}/api/v1/lb/{quote(service, safe='')}/{endpoint}"


class RouteClient:
    """Long-polls the controller and hands every new table to ``on_table``.

    The next poll starts as soon as a table is applied: its ``known=`` is the
    acknowledgement the controller waits for before it stops a draining replica.
    """

    def __init__(
        self,
        home: Home,
        service: str,
        on_table: Callable[[RouteTable], None],
        wait_s: float = 25.0,
        min_backoff_s: float = 0.2,
        max_backoff_s: float = 1.0,
        worker: str = "",
    ) -> None:
        self._home = home
        self._worker = worker  # lbscale: this LB worker's id in its polls (its acknowledgement)
        self._service = service
        self._on_table = on_table
        self._wait_s = wait_s
        self._min_backoff = min_backoff_s
        self._max_backoff = max_backoff_s
        self.known = ""

    async def poll_once(self) -> RouteTable:
        """One long-poll; raises ControlHTTPError or ValueError when it fails."""
        url = self._home.controller_url()
        if url is None:
            raise control_http.ControlHTTPError("no controller recorded in STEADY_HOME")
        wait = int(self._wait_s) if self._wait_s == int(self._wait_s) else self._wait_s
        target = (
            service_url(url, self._service, "routes")
            + f"?known={quote(self.known, safe=':')}&wait={wait}"
            + (f"&worker={quote(self._worker)}" if self._worker else "")
        )
        status, body = await control_http.request(
            target, timeout=self._wait_s + 10.0, home=self._home
        )
        if status != 200:
            raise control_http.ControlHTTPError(f"routes poll answered {status}")
        return RouteTable.from_json(json.loads(body))

    async def run(self) -> None:
        """Poll forever; keep the last table through any failure."""
        backoff = self._min_backoff
        while True:
            try:
                table = await self.poll_once()
            except (control_http.ControlHTTPError, ValueError) as exc:
                log.debug("route poll failed: %s", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            backoff = self._min_backoff
            if table.key != self.known:
                self._on_table(table)
                self.known = table.key


class LoadReporter:
    """Posts the proxy's per-replica counts every ``interval`` seconds; failures are ignored."""

    def __init__(
        self,
        home: Home,
        service: str,
        snapshot: Callable[[], Mapping[str, Any]],
        interval: float = 0.5,
    ) -> None:
        self._home = home
        self._service = service
        self._snapshot = snapshot
        self._interval = interval

    def build(self) -> dict[str, Any]:
        report = {"lb_pid": os.getpid(), **self._snapshot(), "time": time.time()}
        return report

    async def report_once(self) -> bool:
        url = self._home.controller_url()
        if url is None:
            return False
        body = json.dumps(self.build()).encode()
        try:
            status, _ = await control_http.request(
                service_url(url, self._service, "report"),
                method="POST",
                body=body,
                timeout=max(self._interval * 4, 2.0),
                home=self._home,
            )
        except control_http.ControlHTTPError as exc:
            log.debug("load report failed: %s", exc)
            return False
        return 200 <= status < 300

    async def run(self) -> None:
        while True:
            await self.report_once()
            await asyncio.sleep(self._interval)
