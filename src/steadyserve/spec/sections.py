"""The sections of a service file: probe, replica and autoscaling policies,
update modes, canary, load-balancer limits and the ``service:`` section."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import (
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from steadyserve.core.routing.options import (
    DEFAULT_BLOCK_BYTES,
    DEFAULT_EPSILON,
    DEFAULT_IMBALANCE,
    DEFAULT_MAX_ENTRIES,
)
from steadyserve.spec.autoscaling import AutoscalingConfig as AutoscalingConfig
from steadyserve.spec.autoscaling import ReplicaPolicy as ReplicaPolicy
from steadyserve.spec.base import _Model
from steadyserve.spec.canary import BlueGreenPolicy, CanaryPolicy
from steadyserve.spec.canary import CanaryAnalysis as CanaryAnalysis
from steadyserve.spec.canary import CanaryStep as CanaryStep
from steadyserve.spec.errors import _fail
from steadyserve.spec.fields import (
    AffinityKey,
    AuthKey,
    HeaderName,
    JsonData,
    JsonMapping,
    LoadBalancingPolicyField,
    NonEmptyText,
    NonNegativeInt,
    PortNumber,
    PositiveInt,
    PositiveSeconds,
    QueueLimit,
    RoutePrefix,
    ScalarText,
    Seconds,
    Surge,
    Unavailable,
    UpdateModeField,
    UrlPath,
)
from steadyserve.spec.pool import PoolPolicy, fold_workers


class TlsConfig(_Model):
    """SkyServe's ``service.tls``: the load balancer terminates TLS with these files.

    Relative paths resolve like ``workdir`` (spec/path_rule.py)."""

    keyfile: NonEmptyText
    certfile: NonEmptyText

    @model_validator(mode="before")
    @classmethod
    def _old_https_names(cls, data: Any) -> Any:
        """SkyServe's older ``service.https`` spelled them ``key`` and ``cert``."""
        if isinstance(data, dict) and ("key" in data or "cert" in data):
            renamed = {"key": "keyfile", "cert": "certfile"}
            return {renamed.get(k, k): v for k, v in data.items()}
        return data


class ReadinessProbe(_Model):
    """How the controller decides a replica may receive traffic (SkyServe's probe)."""

    path: UrlPath = "/"
    initial_delay_seconds: Seconds = 1200.0
    """Probe failures before this much time after launch do not count (model loading)."""
    timeout_seconds: PositiveSeconds = 15.0
    post_data: JsonData = None
    """When set, the probe is a POST of this JSON (model servers often need a real request)."""
    headers: dict[HeaderName, ScalarText] = Field(default_factory=dict)


class RollingUpdate(_Model):
    """Kubernetes' surge/unavailable pair; the defaults never lose ready capacity."""

    max_surge: Surge = "100%"
    max_unavailable: Unavailable = 0

    @model_validator(mode="after")
    def _can_progress(self) -> RollingUpdate:
        if _is_zero(self.max_surge) and _is_zero(self.max_unavailable):
            raise _fail(
                "max_surge and max_unavailable cannot both be 0 (an update could never progress)"
            )
        return self


def _is_zero(value: int | str) -> bool:
    return value in (0, "0%") or (isinstance(value, str) and int(value[:-1]) == 0)


def _resolve_percent(value: int | str, target: int, *, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    scaled = int(value[:-1]) * target
    return -(-scaled // 100) if round_up else scaled // 100


class PrefixAffinitySection(_Model):
    """``service.load_balancer.prefix_affinity``: how ``prefix_affinity`` cuts
    prompts and how much it remembers (docs/load-balancer.md explains the defaults)."""

    block_bytes: PositiveInt = DEFAULT_BLOCK_BYTES
    max_entries_per_replica: PositiveInt = DEFAULT_MAX_ENTRIES
    imbalance_threshold: Seconds = DEFAULT_IMBALANCE
    """Requests more than the least loaded replica; a number >= 0 (not seconds)."""


class ReplicaMetricsSection(_Model):
    """``service.load_balancer.replica_metrics``: scrape each replica's Prometheus
    endpoint; the request-aware policies weigh replicas by ``gauge`` while fresh."""

    path: UrlPath = "/metrics"
    gauge: NonEmptyText = "vllm:num_requests_waiting"
    interval_s: PositiveSeconds = 1.0
    timeout_s: PositiveSeconds = 0.5
    max_age_s: PositiveSeconds = 5.0


METHOD = re.compile(r"[A-Z][A-Z-]{0,31}")  # an HTTP method token, as sent


class LoadBalancerLimits(_Model):
    """``service.load_balancer:``: how long the load balancer waits for clients and
    how many client connections it holds, and how the request-aware policies are
    tuned (docs/load-balancer.md)."""

    header_timeout_s: PositiveSeconds = 20.0
    body_timeout_s: PositiveSeconds = 30.0
    idle_timeout_s: PositiveSeconds = 75.0
    max_connections: PositiveInt = 10000
    workers: int | Literal["auto"] = 1
    """Load-balancer processes on the endpoint (SO_REUSEPORT); ``auto``: cores / 2."""
    prefix_affinity: PrefixAffinitySection = Field(default_factory=PrefixAffinitySection)
    affinity_key: AffinityKey | None = None
    """What ``session_affinity`` sticks on: ``header:NAME``, ``cookie:NAME``, ``json:/ptr``."""
    affinity_epsilon: Seconds = DEFAULT_EPSILON
    """No replica above ``(1 + epsilon)`` times the mean load (a number >= 0)."""
    replica_metrics: ReplicaMetricsSection | None = None
    trusted_proxies: list[str] = Field(default_factory=list)
    """CIDRs of proxies in front: from these peers the access log's ``client`` is
    read from ``X-Forwarded-For`` (lb/access_log.py)."""
    idempotent_methods: list[str] = Field(default_factory=list)
    """Methods this service's handlers make idempotent (``POST`` of a model server
    that only computes), sent again after a replica failed like ``GET`` and ``PUT``
    (lb/retry.py); the standard idempotent methods always are."""

    @field_validator("idempotent_methods")
    @classmethod
    def _methods(cls, value: list[str]) -> list[str]:
        for i, item in enumerate(value):
            if not METHOD.fullmatch(item) or item == "CONNECT":
                raise _fail(f"[{i}] {item!r} is not an HTTP method in capitals (POST, PATCH)")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for i, item in enumerate(value):
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise _fail(f"[{i}] {item!r} is not an address or CIDR (10.0.0.0/8)") from None
        return value

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        if value == "auto" or (type(value) is int and value > 0):
            return value
        raise _fail('must be an integer >= 1 or "auto" (half the cores, at least 1)')


class ServiceSection(_Model):
    """The ``service:`` section: replicas, probes, updates, load balancing."""

    readiness_probe: ReadinessProbe = Field(default_factory=ReadinessProbe)
    replicas: NonNegativeInt | None = None
    """A fixed count; None exactly when ``replica_policy`` is given."""
    replica_policy: ReplicaPolicy | None = None
    autoscaling_config: AutoscalingConfig | None = Field(default=None, exclude=True)
    """Ray Serve's name for ``replica_policy``; always None once validated (it becomes one)."""
    update_mode: UpdateModeField = "rolling"
    update_deadline_s: PositiveSeconds = 600.0
    history_limit: PositiveInt = 10
    """How many versions keep their workdir snapshot (like revisionHistoryLimit)."""
    rolling_update: RollingUpdate = Field(default_factory=RollingUpdate)
    canary: CanaryPolicy = Field(default_factory=CanaryPolicy)
    blue_green: BlueGreenPolicy = Field(default_factory=BlueGreenPolicy)
    max_ongoing_requests: PositiveInt = 100
    max_queued_requests: QueueLimit = -1
    """-1 is unbounded; beyond the limit the load balancer answers 503 at once."""
    load_balancing_policy: LoadBalancingPolicyField = "least_load"
    load_balancer: LoadBalancerLimits = Field(default_factory=LoadBalancerLimits)
    request_timeout_s: PositiveSeconds | None = None
    """A replica's time to complete a response (504 after); None: no limit."""
    cold_start_timeout_s: PositiveSeconds = 60.0
    """With ``min_replicas: 0``: how long the load balancer holds a request that
    arrives while no replica serves, waiting for the first to become ready (503 after)."""
    graceful_shutdown_wait_loop_s: PositiveSeconds = 2.0
    graceful_shutdown_timeout_s: Seconds = 20.0
    """After a drain, the time from SIGTERM to SIGKILL: what the replica's own server
    gets to finish work the load balancer did not send (Ray Serve's meaning)."""
    drain_timeout_s: Seconds = 600.0
    """The longest a drain waits for the load balancer's in-flight requests to a
    leaving replica (long LLM streams): past it the replica is stopped anyway and an
    event says what that cut."""
    health_check_period_s: PositiveSeconds = 10.0
    health_check_timeout_s: PositiveSeconds = 30.0
    user_config: JsonData = None
    reconfigure_path: UrlPath | None = None
    access_log: StrictBool = False
    """The load balancer logs one JSON line per request (docs/observability.md)."""
    websocket_drain_s: Seconds = 10.0
    """A WebSocket to a draining replica may stay open this long; then the load
    balancer closes it with 1001 "going away" (docs/load-balancer.md)."""
    port: PortNumber | None = None
    """The endpoint's port; None means the next free one from 30001."""
    tls: TlsConfig | None = None
    """SkyServe's ``service.tls`` (older ``https``): the load balancer serves HTTPS."""
    auth_key: AuthKey | None = None
    """SkyServe's ``auth_key``: the load balancer answers 401 to a request without
    ``Authorization: Bearer <auth_key>``."""
    ports: PortNumber | None = None
    """SkyServe's replica port: what a replica listens on when ``run`` ignores ``$PORT``."""
    isolation: Literal["auto", "none", "network"] = "auto"
    """``network``: each replica in its own network namespace (docs/isolation.md);
    ``auto`` is ``network`` exactly when ``run`` ignores ``$PORT``, else ``none``."""
    controller_resources: JsonMapping | None = Field(default=None, exclude=True)
    """SkyServe's resources for its controller VM; the controller here is a process on
    this machine, so it is named once as not applicable and never stored."""

    pool: PoolPolicy | None = None
    """SkyPilot's pool (``sky jobs pool apply``): the replicas are workers that run
    jobs (``steady jobs launch --pool``), with no load balancer and no endpoint
    (docs/pools.md). A file's top-level ``pool:`` lands here (models.py)."""

    @model_validator(mode="before")
    @classmethod
    def _a_pool_is_sized_by_its_workers(cls, data: Any) -> Any:
        """``workers`` beside ``pool:`` is the pool's size (SkyPilot's spec); a
        pool's replica count is its floor of workers, never ``replicas``."""
        data = fold_workers(data)
        if not isinstance(data, dict) or data.get("pool") is None:
            return data
        pool = data["pool"]
        size = None
        if isinstance(pool, dict):
            low = pool.get("min_workers")
            size = low if low is not None else pool.get("workers")
        fits = isinstance(size, int) and not isinstance(size, bool) and size >= 0
        size = size if fits else 0  # a bad size: the pool's own check says so
        # A stored spec carries the replicas this made (its normal form): the same count.
        for key in ("replicas", "replica_policy", "autoscaling_config"):
            if data.get(key) is not None and not (key == "replicas" and data[key] == size):
                raise _fail(
                    "{key} does not apply to a pool (size it with pool.workers, or"
                    " pool.min_workers and pool.max_workers)",
                    key=key,
                )
        return {**data, "replicas": size}

    @model_validator(mode="before")
    @classmethod
    def _https_is_tls(cls, data: Any) -> Any:
        """SkyServe's older name ``https:`` (``key``/``cert``) means ``tls:``."""
        if isinstance(data, dict) and "https" in data:
            if data.get("tls") is not None:
                raise _fail("tls and https are mutually exclusive (https is tls's older name)")
            rest = {k: v for k, v in data.items() if k != "https"}
            return {**rest, "tls": data["https"]}
        return data

    route_prefix: RoutePrefix | None = None
    """Served under this prefix on the gateway port too; None: not on it."""
    served_model_names: list[NonEmptyText] = Field(default_factory=list)
    """OpenAI ``model`` names this service answers on the gateway port (vLLM's
    ``--served-model-name``): the body's ``model`` picks the service there."""

    @field_validator("readiness_probe", mode="before")
    @classmethod
    def _bare_path(cls, value: Any) -> Any:
        """SkyServe allows ``readiness_probe: /health``; store the object form only,
        so consumers and the change classifier see one shape."""
        if isinstance(value, str):
            return {"path": value}
        if value is not None and not isinstance(value, (dict, ReadinessProbe)):
            raise _fail("must be a URL path or a mapping with path:")
        return value

    @model_validator(mode="before")
    @classmethod
    def _one_replica_by_default(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and data.get("replicas") is None
            and data.get("replica_policy") is None
            and data.get("autoscaling_config") is None
            and data.get("pool") is None  # a pool's size is its workers
        ):
            return {**data, "replicas": 1}
        return data

    @model_validator(mode="after")
    def _preview_is_another_port(self) -> ServiceSection:
        preview = self.blue_green.preview_port
        if preview is not None and preview == self.port:
            raise _fail(
                f"blue_green.preview_port: {preview} is the service's own port (use another)"
            )
        return self

    @model_validator(mode="after")
    def _count_or_policy(self) -> ServiceSection:
        if self.replicas is not None and self.replica_policy is not None:
            raise _fail(
                "replicas and replica_policy are mutually exclusive"
                " (a fixed count, or autoscaling bounds)"
            )
        if self.load_balancing_policy == "session_affinity" and (
            self.load_balancer.affinity_key is None
        ):
            raise _fail(
                "load_balancing_policy session_affinity needs load_balancer.affinity_key"
                ' (like "header:X-Session-ID")'
            )
        if self.autoscaling_config is not None:
            if self.replica_policy is not None:
                raise _fail(
                    "replica_policy and autoscaling_config are mutually exclusive"
                    " (autoscaling_config is Ray Serve's name for replica_policy; use one)"
                )
            if self.replicas is not None:
                raise _fail(
                    "replicas and autoscaling_config are mutually exclusive"
                    " (a fixed count, or autoscaling bounds)"
                )
        return self

    @model_validator(mode="after")
    def _auth_key_on_its_endpoint(self) -> ServiceSection:
        """The key is checked by the service's own load balancer; the gateway (a
        ``route_prefix``) would serve the service without it."""
        if self.auth_key is not None and self.route_prefix is not None:
            raise _fail(
                "auth_key: checked on the service's own endpoint only, and route_prefix"
                " also serves it on the gateway, without the check: drop one of them"
            )
        return self

    @model_validator(mode="after")
    def _per_accelerator_targets(self) -> ServiceSection:
        """SkyServe's pairing: a per-accelerator ``target_qps_per_replica`` is what
        ``instance_aware_least_load`` weighs replicas by, and only it reads one."""
        policy = self.replica_policy
        per_accelerator = policy is not None and isinstance(policy.target_qps_per_replica, dict)
        instance_aware = self.load_balancing_policy == "instance_aware_least_load"
        if per_accelerator and not instance_aware:
            raise _fail(
                "replica_policy.target_qps_per_replica: a per-accelerator mapping needs"
                " load_balancing_policy: instance_aware_least_load"
            )
        # instance_aware_least_load without a mapping: every replica weighs the same
        # (capacity 1.0), as SkyPilot falls back to even weights: least load.
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _ray_synonym(cls, data: Any, handler: Callable[[Any], ServiceSection]) -> ServiceSection:
        """Store ``autoscaling_config`` as the ``replica_policy`` it means."""
        section = handler(data)
        if section.autoscaling_config is None:
            return section
        policy = section.autoscaling_config.as_replica_policy()
        return section.model_copy(update={"replica_policy": policy, "autoscaling_config": None})

    @property
    def target_replicas(self) -> int:
        """The count to run now, before any autoscaling decision."""
        if self.replicas is not None:
            return self.replicas
        assert self.replica_policy is not None  # guaranteed by _count_or_policy
        initial = self.replica_policy.initial_replicas
        return self.replica_policy.min_replicas if initial is None else initial

    def max_surge_count(self, target: int) -> int:
        """Replicas that may run above ``target`` during an update; a percent rounds up."""
        return _resolve_percent(self.rolling_update.max_surge, target, round_up=True)

    def max_unavailable_count(self, target: int) -> int:
        """Ready replicas that may be missing below ``target``; a percent rounds down.

        As in Kubernetes, when both limits resolve to 0 (say ``max_surge: 0`` and
        ``max_unavailable: 10%`` of 3) one replica may be unavailable, or the update
        could never start. Never more than ``target``.
        """
        unavailable = _resolve_percent(self.rolling_update.max_unavailable, target, round_up=False)
        if unavailable == 0 and target > 0 and self.max_surge_count(target) == 0:
            unavailable = 1
        return min(unavailable, target)
