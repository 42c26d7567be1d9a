"""The sections of a service file: probe, replica and autoscaling policies,
update modes, canary, load-balancer limits and the ``service:`` section."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from steadyserve.compat.skypilot import TlsConfig
from steadyserve.spec.base import _Model
from steadyserve.spec.canary import BlueGreenPolicy, CanaryPolicy
from steadyserve.spec.canary import CanaryAnalysis as CanaryAnalysis
from steadyserve.spec.canary import CanaryStep as CanaryStep
from steadyserve.spec.errors import _fail
from steadyserve.spec.fields import (
    HeaderName,
    JsonData,
    JsonMapping,
    LoadBalancingPolicyField,
    NonNegativeInt,
    PortNumber,
    PositiveInt,
    PositiveNumber,
    PositiveSeconds,
    QueueLimit,
    RoutePrefix,
    ScalarText,
    Seconds,
    Surge,
    Unavailable,
    UpdateModeField,
    UrlPath,
    _finite,
)


class ReadinessProbe(_Model):
    """How the controller decides a replica may receive traffic (SkyServe's probe)."""

    path: UrlPath = "/"
    initial_delay_seconds: Seconds = 1200.0
    """Probe failures before this much time after launch do not count (model loading)."""
    timeout_seconds: PositiveSeconds = 15.0
    post_data: JsonData = None
    """When set, the probe is a POST of this JSON (model servers often need a real request)."""
    headers: dict[HeaderName, ScalarText] = Field(default_factory=dict)


_QPS_FIELDS = ("target_qps_per_replica", "upscale_delay_seconds", "downscale_delay_seconds")
"""SkyServe's policy: request rate per replica over a 60 s window."""
_ONGOING_FIELDS = (
    "target_ongoing_requests",
    "look_back_period_s",
    "upscale_delay_s",
    "downscale_delay_s",
    "downscale_to_zero_delay_s",
    "upscaling_factor",
    "downscaling_factor",
    "initial_replicas",
)
"""Ray Serve's policy: ongoing requests per replica, averaged over a look-back period."""
_TARGETS = (_QPS_FIELDS[0], _ONGOING_FIELDS[0])


def _initial_within_bounds(policy: ReplicaPolicy | AutoscalingConfig) -> None:
    """A rule shared by ``replica_policy`` and ``autoscaling_config`` (after the fields)."""
    initial = policy.initial_replicas
    if initial is not None and not policy.min_replicas <= initial <= policy.max_replicas:
        raise _fail("initial_replicas must be between min_replicas and max_replicas")


def _max_not_below_min(cls: type[_Model], value: int, info: ValidationInfo) -> int:
    """``max_replicas`` of both autoscaling spellings (SkyServe's and Ray Serve's)."""
    low = info.data.get("min_replicas")
    if low is not None and value < low:
        raise _fail("must be an integer >= min_replicas")
    return value


class ReplicaPolicy(_Model):
    """Autoscaling bounds plus one target: SkyServe's request rate or Ray Serve's load.

    Only ``min_replicas`` means a fixed size (``max_replicas`` is filled in equal to
    it), as in SkyServe's ``replica_policy``. A target needs an
    explicit ``max_replicas``, and each policy's tuning fields go with its own
    target only: a field that would be ignored is an error instead.
    """

    min_replicas: NonNegativeInt
    max_replicas: NonNegativeInt
    target_qps_per_replica: PositiveNumber | None = None
    upscale_delay_seconds: Seconds = 300.0
    downscale_delay_seconds: Seconds = 1200.0
    target_ongoing_requests: PositiveNumber | None = None
    look_back_period_s: PositiveSeconds = 30.0
    upscale_delay_s: Seconds = 30.0
    downscale_delay_s: Seconds = 600.0
    downscale_to_zero_delay_s: Seconds | None = None
    """The 1 -> 0 step of Ray's policy; None means ``downscale_delay_s``."""
    upscaling_factor: PositiveNumber | None = None
    """Ray's gain on upscaling steps; None means 1."""
    downscaling_factor: PositiveNumber | None = None
    initial_replicas: NonNegativeInt | None = None
    """Ray's count at deploy time; None means ``min_replicas``."""
    base_ondemand_fallback_replicas: NonNegativeInt | None = None
    dynamic_ondemand_fallback: StrictBool | None = None
    spot_placer: StrictStr | None = None
    """SkyServe's spot keys: validated, reported as not applicable (spec/skypilot.py)."""

    @model_validator(mode="before")
    @classmethod
    def _max_defaults_to_min(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_replicas") is None and "min_replicas" in data:
            # A bad target value, or both targets at once, is reported as such after.
            given = [t for t in _TARGETS if t in data and (_finite(data[t]) or 0) > 0]
            if len(given) == 1:
                raise _fail(f"{given[0]} needs max_replicas (the most replicas to scale up to)")
            return {**data, "max_replicas": data["min_replicas"]}
        return data

    _max_not_below_min = field_validator("max_replicas")(_max_not_below_min)

    @model_validator(mode="after")
    def _one_target(self) -> ReplicaPolicy:
        if self.target_qps_per_replica is not None and self.target_ongoing_requests is not None:
            raise _fail(
                "target_qps_per_replica and target_ongoing_requests are mutually exclusive"
                " (pick SkyServe's or Ray Serve's autoscaling policy)"
            )
        target = self.autoscaling_target
        own = {"qps": _QPS_FIELDS, "ongoing_requests": _ONGOING_FIELDS, None: ()}[target]
        # Stored specs list every field with its default, so only a value that
        # differs from the default (one that would change something) is judged.
        for name in (*_QPS_FIELDS, *_ONGOING_FIELDS):
            if name in own or getattr(self, name) == type(self).model_fields[name].default:
                continue
            policy = "SkyServe's" if name in _QPS_FIELDS else "Ray Serve's"
            needs = _QPS_FIELDS[0] if name in _QPS_FIELDS else _ONGOING_FIELDS[0]
            raise _fail(f"{name} is {policy} autoscaling field and needs {needs}")
        if self.max_replicas > self.min_replicas and target is None:
            raise _fail(
                "max_replicas > min_replicas needs an autoscaling target:"
                " target_qps_per_replica or target_ongoing_requests"
            )
        _initial_within_bounds(self)
        return self

    @property
    def autoscaling_target(self) -> Literal["qps", "ongoing_requests"] | None:
        """Which policy drives scaling, or None for a fixed size."""
        if self.target_qps_per_replica is not None:
            return "qps"
        if self.target_ongoing_requests is not None:
            return "ongoing_requests"
        return None


class AutoscalingConfig(_Model):
    """Ray Serve's ``autoscaling_config``, with Ray's field names and defaults.

    Accepted under ``service:`` as a synonym of ``replica_policy`` and stored as
    one (with ``target_ongoing_requests``), so the rest of SteadyServe sees one shape.
    """

    min_replicas: NonNegativeInt = 1
    initial_replicas: NonNegativeInt | None = None
    max_replicas: PositiveInt = 1
    target_ongoing_requests: PositiveNumber = 2.0
    look_back_period_s: PositiveSeconds = 30.0
    upscale_delay_s: Seconds = 30.0
    downscale_delay_s: Seconds = 600.0
    downscale_to_zero_delay_s: Seconds | None = None
    upscaling_factor: PositiveNumber | None = None
    downscaling_factor: PositiveNumber | None = None

    @model_validator(mode="before")
    @classmethod
    def _target_needs_max(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and (_finite(data.get("target_ongoing_requests")) or 0) > 0
            and data.get("max_replicas") is None
        ):
            raise _fail(
                "target_ongoing_requests needs max_replicas (the most replicas to scale up to)"
            )
        return data

    _max_not_below_min = field_validator("max_replicas")(_max_not_below_min)

    @model_validator(mode="after")
    def _coherent(self) -> AutoscalingConfig:
        _initial_within_bounds(self)
        return self

    def as_replica_policy(self) -> ReplicaPolicy:
        return ReplicaPolicy.model_validate(self.model_dump())


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


class LoadBalancerLimits(_Model):
    """``service.load_balancer:``: how long the load balancer waits for clients and
    how many client connections it holds (docs/load-balancer.md)."""

    header_timeout_s: PositiveSeconds = 20.0
    body_timeout_s: PositiveSeconds = 30.0
    idle_timeout_s: PositiveSeconds = 75.0
    max_connections: PositiveInt = 10000
    workers: int | Literal["auto"] = 1
    """Load-balancer processes on the endpoint (SO_REUSEPORT); ``auto``: cores / 2."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """CIDRs of proxies in front: from these peers the access log's ``client`` is
    read from ``X-Forwarded-For`` (lb/access_log.py)."""

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
    ports: PortNumber | None = None
    """SkyServe's replica port: what a replica listens on when ``run`` ignores ``$PORT``."""
    controller_resources: JsonMapping | None = Field(default=None, exclude=True)
    """SkyServe's resources for its controller VM; the controller here is a process on
    this machine, so it is named once as not applicable and never stored."""

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
