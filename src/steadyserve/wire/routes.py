"""The route table: what the controller tells a load balancer, as one typed value.

The controller builds it (controller/routing.py) and serves ``to_json()`` on the
long-poll; every load balancer, the gateway and the handles inside replicas read
it back with ``from_json()``, which checks every field, because a table is input
from another process. One module for both sides means a field the controller
writes is a field the load balancer reads (tests/unit/test_wire_schema.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from steadyserve.core.routing.options import DEFAULT_OPTIONS, PolicyOptions, ReplicaMetrics
from steadyserve.core.routing.registry import POLICIES
from steadyserve.wire.mirror import Mirror

# The only namespaces a load balancer enters: the ones the local backend made
# for isolated replicas (backends/netns.py names them ssv-<home>-<service>-<id>).
_NETNS = re.compile(r"/run/netns/ssv-[A-Za-z0-9_.-]{1,200}")

STATIC_EPOCH = "static"


@dataclass(frozen=True)
class ReplicaRoute:
    """One routable replica: where to connect, which version it runs, and what a
    routing policy may weigh it by (core/routing/policies.py: ``Candidate``).

    ``accelerator`` (``"A100"``, or None) and ``capacity`` (a relative weight,
    1.0 for every replica unless a policy's spec says otherwise) are written to
    the JSON only when set, so a table without them reads as before."""

    id: int
    version: int
    host: str
    port: int
    accelerator: str | None = None
    capacity: float = 1.0
    netns: str | None = None
    """The path of the replica's own network namespace (``/run/netns/ssv-...``):
    ``host:port`` is inside it, and a connection is made from there."""
    models: frozenset[str] | None = None
    """The multiplexed model ids the replica reports holding (loaded or loading);
    None: it reported none (not a multiplexed deployment, or not read yet)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "version": self.version}
        out["host"], out["port"] = self.host, self.port
        if self.accelerator is not None:
            out["accelerator"] = self.accelerator
        if self.netns is not None:
            out["netns"] = self.netns
        if self.capacity != 1.0:
            out["capacity"] = self.capacity
        if self.models is not None:
            out["models"] = sorted(self.models)
        return out

    @classmethod
    def from_json(cls, item: Any, prefix: str) -> ReplicaRoute:
        if not isinstance(item, dict):
            raise ValueError(f"route table: {prefix.rstrip('.')} is not an object")
        accelerator = item.get("accelerator")
        if accelerator is not None and not isinstance(accelerator, str):
            raise ValueError(f"route table: {prefix}accelerator must be a string or null")
        capacity = item.get("capacity", 1.0)
        if not _positive_number(capacity):
            raise ValueError(f"route table: {prefix}capacity must be a number > 0")
        netns = item.get("netns")
        if netns is not None and not (
            isinstance(netns, str) and _NETNS.fullmatch(netns) is not None
        ):
            raise ValueError(f"route table: {prefix}netns must be /run/netns/ssv-... or null")
        models = item.get("models")
        if models is not None and not (
            isinstance(models, list) and all(isinstance(m, str) for m in models)
        ):
            raise ValueError(f"route table: {prefix}models must be a list of strings or null")
        return cls(
            id=_int_field(item, "id", prefix),
            version=_int_field(item, "version", prefix),
            host=_field(item, "host", str, prefix),
            port=_int_field(item, "port", prefix),
            accelerator=accelerator,
            capacity=float(capacity),
            netns=netns,
            models=None if models is None else frozenset(models),
        )


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
    # CIDRs whose X-Forwarded-For names the client (the access log's ``client``).
    trusted_proxies: tuple[str, ...] = ()
    # Methods the service marks idempotent, besides the standard ones (lb/retry.py).
    idempotent_methods: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``load_balancer`` block (``request_timeout_s`` is a top-level field)."""
        return {
            "header_timeout_s": self.header_timeout_s,
            "body_timeout_s": self.body_timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
            "max_connections": self.max_connections,
            "trusted_proxies": list(self.trusted_proxies),
            "idempotent_methods": list(self.idempotent_methods),
        }

    @classmethod
    def from_json(cls, block: Any, request_timeout: Any) -> Limits:
        if not isinstance(block, dict):
            raise ValueError("route table: load_balancer must be an object")
        unknown = set(block) - {
            "header_timeout_s",
            "body_timeout_s",
            "idle_timeout_s",
            "max_connections",
            "workers",  # how many LB processes run: the controller's business, ignored here
            # The policies' tuning: the table carries it as ``policy_options``.
            "prefix_affinity",
            "affinity_key",
            "affinity_epsilon",
            "replica_metrics",
            "trusted_proxies",
            "idempotent_methods",
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
        trusted = block.get("trusted_proxies", [])
        if not isinstance(trusted, list) or not all(isinstance(c, str) for c in trusted):
            raise ValueError("route table: load_balancer.trusted_proxies must be a list of CIDRs")
        methods = block.get("idempotent_methods", [])
        if not isinstance(methods, list) or not all(
            isinstance(m, str) and m.isascii() and m for m in methods
        ):
            raise ValueError("route table: load_balancer.idempotent_methods must be method names")
        return cls(
            trusted_proxies=tuple(trusted),
            idempotent_methods=tuple(methods),
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


def options_to_json(options: PolicyOptions) -> dict[str, Any]:
    """``policy_options``: the request-aware policies' tuning (core/routing/options.py)."""
    out: dict[str, Any] = {
        "block_bytes": options.block_bytes,
        "max_entries_per_replica": options.max_entries_per_replica,
        "imbalance_threshold": options.imbalance_threshold,
        "affinity_key": options.affinity_key,
        "affinity_epsilon": options.affinity_epsilon,
        "replica_metrics": None,
    }
    metrics = options.replica_metrics
    if metrics is not None:
        out["replica_metrics"] = {
            "path": metrics.path,
            "gauge": metrics.gauge,
            "interval_s": metrics.interval_s,
            "timeout_s": metrics.timeout_s,
            "max_age_s": metrics.max_age_s,
        }
    return out


def _options(value: Any) -> PolicyOptions:
    """Read ``policy_options``; absent (an older table) is the defaults."""
    if value is None:
        return DEFAULT_OPTIONS
    if not isinstance(value, dict):
        raise ValueError("route table: policy_options must be an object")
    prefix = "policy_options."
    defaults = DEFAULT_OPTIONS
    ints = {}
    for name in ("block_bytes", "max_entries_per_replica"):
        number = value.get(name, getattr(defaults, name))
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise ValueError(f"route table: {prefix}{name} must be an int > 0")
        ints[name] = number
    floats = {}
    for name in ("imbalance_threshold", "affinity_epsilon"):
        number = value.get(name, getattr(defaults, name))
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not number >= 0:
            raise ValueError(f"route table: {prefix}{name} must be a number >= 0")
        floats[name] = float(number)
    key = value.get("affinity_key")
    if key is not None and not isinstance(key, str):
        raise ValueError(f"route table: {prefix}affinity_key must be a string or null")
    metrics = value.get("replica_metrics")
    scrape = None
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise ValueError(f"route table: {prefix}replica_metrics must be an object or null")
        where = f"{prefix}replica_metrics."
        times = {}
        for name in ("interval_s", "timeout_s", "max_age_s"):
            if not _positive_number(metrics.get(name)):
                raise ValueError(f"route table: {where}{name} must be a number > 0")
            times[name] = float(metrics[name])
        scrape = ReplicaMetrics(
            path=_field(metrics, "path", str, where),
            gauge=_field(metrics, "gauge", str, where),
            **times,
        )
    return PolicyOptions(
        block_bytes=ints["block_bytes"],
        max_entries_per_replica=ints["max_entries_per_replica"],
        imbalance_threshold=floats["imbalance_threshold"],
        affinity_key=key,
        affinity_epsilon=floats["affinity_epsilon"],
        replica_metrics=scrape,
    )


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
    # How long a WebSocket to a replica that left the table stays open.
    websocket_drain_s: float = 10.0
    # Progressive delivery: percent of traffic per version (a canary). Empty: every
    # routable replica alike, whatever its version (as without a canary).
    weights: tuple[tuple[int, int], ...] = ()
    # Blue-green preview: (port, version) the LB also listens on, for that version only.
    preview: tuple[int, int] | None = None
    # How prefix_affinity and session_affinity are tuned (service.load_balancer).
    options: PolicyOptions = DEFAULT_OPTIONS
    # A multiplexed deployment's (some replica reported models): the load balancer
    # reads serve_multiplexed_model_id and routes by it (core/routing/multiplex.py).
    multiplexed: bool = False
    # A canary's shadow step: what to mirror to the new version (wire/mirror.py).
    mirror: Mirror | None = None

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
        replicas = [
            ReplicaRoute.from_json(item, f"replicas[{i}].") for i, item in enumerate(raw_replicas)
        ]
        blocked = data.get("blocked_paths") or []
        if not isinstance(blocked, list) or not all(isinstance(p, str) for p in blocked):
            raise ValueError("route table: blocked_paths must be a list of paths")
        limits = None
        if "load_balancer" in data or data.get("request_timeout_s") is not None:
            block = data.get("load_balancer")
            limits = Limits.from_json({} if block is None else block, data.get("request_timeout_s"))
        if not isinstance(data.get("access_log", False), bool):
            raise ValueError("route table: access_log must be a bool")
        if not isinstance(data.get("multiplexed", False), bool):
            raise ValueError("route table: multiplexed must be a bool")
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
            _options(data.get("policy_options")),
            data.get("multiplexed", False),
            Mirror.from_json(data.get("mirror")),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON the controller serves and :meth:`from_json` reads back unchanged."""
        limits = self.limits
        return {
            "epoch": self.epoch,
            "version": self.version,
            "policy": self.policy,
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "replicas": [r.to_json() for r in self.replicas],
            "blocked_paths": sorted(p.decode() for p in self.blocked_paths),
            **({"load_balancer": limits.to_json()} if limits is not None else {}),
            "request_timeout_s": limits.request_timeout_s if limits is not None else None,
            "hold_at_zero_s": self.hold_at_zero_s,
            "access_log": self.access_log,
            "websocket_drain_s": self.websocket_drain_s,
            "weights": {str(v): p for v, p in self.weights},
            "preview": (
                None
                if self.preview is None
                else {"port": self.preview[0], "version": self.preview[1]}
            ),
            "policy_options": options_to_json(self.options),
            "multiplexed": self.multiplexed,
            "mirror": None if self.mirror is None else self.mirror.to_json(),
        }

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


APP_INGRESS_ROUTE = "/api/v1/apps/{app}/ingress"
"""The controller's answer to which service hosts an application's ingress:
``{"application", "service", "deployment"}``, or 404; with ``?docs_path=1`` also
``docs_path``, what a ready replica of it reports in its ``/-/info``."""
DOCS_PATH_QUERY = "docs_path"


def app_ingress_url(controller_url: str, app: str) -> str:
    return controller_url.rstrip("/") + APP_INGRESS_ROUTE.format(app=quote(app, safe=""))
