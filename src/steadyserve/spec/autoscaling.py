"""The autoscaling policy of a service file: SkyServe's ``replica_policy`` and Ray
Serve's ``autoscaling_config``, with each peer's field names and defaults.

Which peer's semantics apply is decided by the target, whatever the spelling:
``target_qps_per_replica`` is SkyServe's autoscaler, ``target_ongoing_requests``
is Ray Serve's (docs/autoscaling.md). Each policy's tuning fields go with its own
target only: a field that would be ignored is an error instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import StrictBool, StrictStr, ValidationInfo, field_validator, model_validator

from steadyserve.core.autoscale.policies import FixedPolicy, OngoingPolicy, Policy, QpsPolicy
from steadyserve.spec.base import _Model
from steadyserve.spec.errors import _fail
from steadyserve.spec.fields import (
    ImportPath,
    NonNegativeInt,
    PositiveInt,
    PositiveNumber,
    PositiveSeconds,
    QpsTarget,
    Seconds,
    _finite,
)

__all__ = ["DEFAULT_POLICY_FUNCTION", "AutoscalingConfig", "RayPolicy", "ReplicaPolicy"]

DEFAULT_POLICY_FUNCTION = "ray.serve.autoscaling_policy:default_autoscaling_policy"
"""Ray's name of its built-in policy: written out, it means the built-in one here too."""

_QPS_FIELDS = (
    "target_qps_per_replica",
    "upscale_delay_seconds",
    "downscale_delay_seconds",
    "num_overprovision",
    "decision_interval_s",
)
"""SkyServe's policy: request rate per replica over a 60 s window, judged every decision."""
_ONGOING_FIELDS = (
    "target_ongoing_requests",
    "look_back_period_s",
    "upscale_delay_s",
    "downscale_delay_s",
    "downscale_to_zero_delay_s",
    "upscaling_factor",
    "downscaling_factor",
    "smoothing_factor",
    "upscale_smoothing_factor",
    "downscale_smoothing_factor",
    "metrics_interval_s",
    "initial_replicas",
    "policy",
)
"""Ray Serve's policy: ongoing requests per replica, averaged over a look-back period."""
_TARGETS = (_QPS_FIELDS[0], _ONGOING_FIELDS[0])

DEPRECATED_RAY_FIELDS = {
    "smoothing_factor": "use upscaling_factor and downscaling_factor",
    "upscale_smoothing_factor": "use upscaling_factor",
    "downscale_smoothing_factor": "use downscaling_factor",
    "metrics_interval_s": "it has no effect (load is reported twice a second)",
}
"""Ray's deprecated fields, accepted with Ray's meaning and a notice (what to use instead)."""


def _is_target(value: Any) -> bool:
    """A target worth a ``needs max_replicas`` message: a number > 0, or a
    per-accelerator map (a bad value is reported by its own field)."""
    return (isinstance(value, dict) and bool(value)) or (_finite(value) or 0) > 0


class RayPolicy(_Model):
    """Ray's ``policy:`` of ``autoscaling_config``: a custom policy function.

    The function is imported from the version's workdir and called in a
    subprocess, never in the controller (controller/policy_runner.py).
    """

    policy_function: ImportPath = DEFAULT_POLICY_FUNCTION

    def is_default_policy_function(self) -> bool:
        return self.policy_function == DEFAULT_POLICY_FUNCTION


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
    it), as in SkyServe's ``replica_policy``. SkyServe's target needs an explicit
    ``max_replicas``; Ray's takes Ray's default of 1.
    """

    min_replicas: NonNegativeInt
    max_replicas: NonNegativeInt
    target_qps_per_replica: QpsTarget | None = None
    """SkyServe's target: one number, or one per accelerator (``{"H100:1": 10, L4: 3}``,
    with ``load_balancing_policy: instance_aware_least_load``)."""
    upscale_delay_seconds: Seconds = 300.0
    downscale_delay_seconds: Seconds = 1200.0
    num_overprovision: NonNegativeInt | None = None
    """SkyServe: replicas run beyond the target (None: none)."""
    decision_interval_s: PositiveSeconds = 20.0
    """SkyServe's decision interval (``AUTOSCALER_DEFAULT_DECISION_INTERVAL_SECONDS``)."""
    target_ongoing_requests: PositiveNumber | None = None
    look_back_period_s: PositiveSeconds = 30.0
    upscale_delay_s: Seconds = 30.0
    downscale_delay_s: Seconds = 600.0
    downscale_to_zero_delay_s: Seconds | None = None
    """The 1 -> 0 step of Ray's policy; None means ``downscale_delay_s``."""
    upscaling_factor: PositiveNumber | None = None
    """Ray's gain on upscaling steps; None means the smoothing factors', else 1."""
    downscaling_factor: PositiveNumber | None = None
    smoothing_factor: PositiveNumber | None = None
    upscale_smoothing_factor: PositiveNumber | None = None
    downscale_smoothing_factor: PositiveNumber | None = None
    metrics_interval_s: PositiveSeconds | None = None
    initial_replicas: NonNegativeInt | None = None
    """Ray's count at deploy time; None means ``min_replicas``."""
    policy: RayPolicy | None = None
    burst: StrictBool = False
    """SteadyServe's burst mode (docs/autoscaling.md); off unless asked for."""
    base_ondemand_fallback_replicas: NonNegativeInt | None = None
    dynamic_ondemand_fallback: StrictBool | None = None
    spot_placer: StrictStr | None = None
    """SkyServe's spot keys: validated, reported as not applicable (compat/skypilot.py)."""

    @model_validator(mode="before")
    @classmethod
    def _max_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_replicas") is None and "min_replicas" in data:
            # A bad target value, or both targets at once, is reported as such after.
            given = [t for t in _TARGETS if t in data and _is_target(data[t])]
            if given == [_QPS_FIELDS[0]]:
                raise _fail(f"{given[0]} needs max_replicas (the most replicas to scale up to)")
            if given == [_ONGOING_FIELDS[0]]:
                return {**data, "max_replicas": 1}  # Ray's default
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

    def deprecated_fields(self) -> dict[str, str]:
        """Ray's deprecated fields this policy sets, each with what to use instead."""
        return {
            name: advice
            for name, advice in DEPRECATED_RAY_FIELDS.items()
            if getattr(self, name) is not None
        }

    def custom_policy_function(self) -> str | None:
        """The import path of Ray's custom policy, or None for the built-in one."""
        if self.policy is None or self.policy.is_default_policy_function():
            return None
        return self.policy.policy_function


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
    smoothing_factor: PositiveNumber | None = None
    upscale_smoothing_factor: PositiveNumber | None = None
    downscale_smoothing_factor: PositiveNumber | None = None
    metrics_interval_s: PositiveSeconds | None = None
    policy: RayPolicy | None = None
    burst: StrictBool = False

    _max_not_below_min = field_validator("max_replicas")(_max_not_below_min)

    @model_validator(mode="after")
    def _coherent(self) -> AutoscalingConfig:
        _initial_within_bounds(self)
        return self

    def as_replica_policy(self) -> ReplicaPolicy:
        return ReplicaPolicy.model_validate(self.model_dump())


if TYPE_CHECKING:
    from steadyserve.spec.sections import ServiceSection


def policy_for(service: ServiceSection) -> Policy:
    """The policy a validated ``service:`` section asks for."""
    spec = service.replica_policy
    if spec is None:
        return FixedPolicy(service.target_replicas)
    if spec.target_qps_per_replica is not None:
        target = spec.target_qps_per_replica
        per_accelerator: tuple[tuple[str, float], ...] = ()
        if isinstance(target, Mapping):
            per_accelerator, target = tuple(target.items()), max(target.values())
        return QpsPolicy(
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            target_qps_per_replica=target,
            upscale_delay_seconds=spec.upscale_delay_seconds,
            downscale_delay_seconds=spec.downscale_delay_seconds,
            num_overprovision=spec.num_overprovision or 0,
            decision_interval_s=spec.decision_interval_s,
            burst=spec.burst,
            per_accelerator=per_accelerator,
        )
    if spec.target_ongoing_requests is not None:
        return OngoingPolicy(
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            target_ongoing_requests=spec.target_ongoing_requests,
            look_back_period_s=spec.look_back_period_s,
            upscale_delay_s=spec.upscale_delay_s,
            downscale_delay_s=spec.downscale_delay_s,
            downscale_to_zero_delay_s=spec.downscale_to_zero_delay_s,
            # Ray's precedence: the factor, else its deprecated smoothing factors.
            upscaling_factor=_first(
                spec.upscaling_factor, spec.upscale_smoothing_factor, spec.smoothing_factor
            ),
            downscaling_factor=_first(
                spec.downscaling_factor, spec.downscale_smoothing_factor, spec.smoothing_factor
            ),
            initial_replicas=spec.initial_replicas,
            policy_function=spec.custom_policy_function(),
            burst=spec.burst,
        )
    return FixedPolicy(spec.min_replicas)


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)
