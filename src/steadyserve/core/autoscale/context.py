"""What a custom policy function is called with: Ray Serve's ``AutoscalingContext``.

A policy written for Ray (``def policy(ctx) -> (replicas, policy_state)``) reads
``ctx.total_num_requests``, ``ctx.current_num_replicas``, ``ctx.config`` and so
on; this is the same object, with Ray's field names, built in the policy's own
subprocess (controller/policy_worker.py) from the plain data the controller
sends (:func:`context_fields`). As in Ray, a field may be given as a callable,
evaluated on first access and cached, so an expensive figure costs nothing
unless the policy reads it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from steadyserve.core.autoscale.policies import OngoingPolicy

__all__ = [
    "CONTEXT_FIELDS",
    "AutoscalingContext",
    "PolicyConfig",
    "build_context",
    "context_fields",
]

CONTEXT_FIELDS = (
    "config",
    "deployment_id",
    "deployment_name",
    "app_name",
    "current_num_replicas",
    "target_num_replicas",
    "running_replicas",
    "total_num_requests",
    "total_queued_requests",
    "aggregated_metrics",
    "raw_metrics",
    "capacity_adjusted_min_replicas",
    "capacity_adjusted_max_replicas",
    "policy_state",
    "last_scale_up_time",
    "last_scale_down_time",
    "current_time",
    "total_pending_async_requests",
)
"""Ray's ``AutoscalingContext`` fields, in Ray's order."""

_LAZY = ("total_num_requests", "total_queued_requests", "aggregated_metrics", "raw_metrics")
"""The fields Ray lets a caller give as callables."""


@dataclass(frozen=True)
class PolicyConfig:
    """``ctx.config``: Ray's ``AutoscalingConfig`` fields and getters."""

    min_replicas: int
    max_replicas: int
    target_ongoing_requests: float
    look_back_period_s: float
    upscale_delay_s: float
    downscale_delay_s: float
    downscale_to_zero_delay_s: float | None
    upscaling_factor: float | None
    downscaling_factor: float | None
    initial_replicas: int | None

    @classmethod
    def of(cls, policy: OngoingPolicy) -> PolicyConfig:
        return cls(
            min_replicas=policy.min_replicas,
            max_replicas=policy.max_replicas,
            target_ongoing_requests=policy.target_ongoing_requests,
            look_back_period_s=policy.look_back_period_s,
            upscale_delay_s=policy.upscale_delay_s,
            downscale_delay_s=policy.downscale_delay_s,
            downscale_to_zero_delay_s=policy.downscale_to_zero_delay_s,
            upscaling_factor=policy.upscaling_factor,
            downscaling_factor=policy.downscaling_factor,
            initial_replicas=policy.initial_replicas,
        )

    def get_target_ongoing_requests(self) -> float:
        return self.target_ongoing_requests

    def get_upscaling_factor(self) -> float:
        return 1.0 if self.upscaling_factor is None else self.upscaling_factor

    def get_downscaling_factor(self) -> float:
        return 1.0 if self.downscaling_factor is None else self.downscaling_factor


class AutoscalingContext:
    """Ray's ``AutoscalingContext``: every field by keyword; the load figures may be
    callables, evaluated once on first access."""

    def __init__(self, **fields: Any) -> None:
        missing = [name for name in CONTEXT_FIELDS if name not in fields]
        unknown = [name for name in fields if name not in CONTEXT_FIELDS]
        if missing or unknown:
            raise TypeError(f"AutoscalingContext: missing {missing}, unknown {unknown}")
        self.__dict__["_values"] = dict(fields)

    def __getattr__(self, name: str) -> Any:
        values: dict[str, Any] = self.__dict__["_values"]
        if name not in values:
            raise AttributeError(name)
        value = values[name]
        if name in _LAZY and callable(value):
            value = values[name] = value()
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in CONTEXT_FIELDS:
            raise AttributeError(name)
        self.__dict__["_values"][name] = value


def context_fields(
    policy: OngoingPolicy,
    *,
    name: str,
    current: int,
    target: int,
    running: list[int],
    total: float,
    queued: float,
    policy_state: dict[str, Any],
    now: float,
) -> dict[str, Any]:
    """The plain data of a context (JSON-ready: ``config`` is a mapping)."""
    return {
        "config": asdict(PolicyConfig.of(policy)),
        "deployment_id": name,
        "deployment_name": name,
        "app_name": name,
        "current_num_replicas": current,
        "target_num_replicas": target,
        "running_replicas": running,
        "total_num_requests": total,
        "total_queued_requests": queued,
        "aggregated_metrics": {},
        "raw_metrics": {},
        "capacity_adjusted_min_replicas": policy.min_replicas,
        "capacity_adjusted_max_replicas": policy.max_replicas,
        "policy_state": policy_state,
        "last_scale_up_time": None,
        "last_scale_down_time": None,
        "current_time": now,
        "total_pending_async_requests": 0,
    }


def build_context(fields: dict[str, Any]) -> AutoscalingContext:
    """A context from :func:`context_fields`' data (in the policy's subprocess)."""
    return AutoscalingContext(**{**fields, "config": PolicyConfig(**fields["config"])})
