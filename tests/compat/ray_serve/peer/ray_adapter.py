"""Ray Serve's autoscaling call surface, mapped onto SteadyServe's pure core.

The ported tests (test_autoscaling_policy.py, test_config_autoscaling.py) keep
Ray's calls, inputs and expected values; this module only translates them: a
Ray ``AutoscalingConfig`` becomes a validated ``service.autoscaling_config``
(``steadyserve.spec``) and its ``OngoingPolicy`` (``policy_for``); Ray's policy
layers call the functions of ``steadyserve.core.autoscale.ray_policy`` that the
controller's ``decide`` runs. Nothing here computes a result.

Ray keeps its delay state in ``ctx.policy_state``; SteadyServe's is a
``RayDelay`` value, stored in the dict under :data:`DELAY_KEY` between calls.
Ray's policy reads ``time.time()``; so does this module (the tests patch it).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from steadyserve.core.autoscale import OngoingPolicy, ray_policy
from steadyserve.core.autoscale.context import AutoscalingContext as AutoscalingContext
from steadyserve.spec import ServiceSpec, SpecError, parse_service
from steadyserve.spec.autoscaling import DEFAULT_POLICY_FUNCTION, policy_for

__all__ = [
    "CONTROL_LOOP_INTERVAL_S",
    "AutoscalingConfig",
    "AutoscalingContext",
    "DeploymentConfig",
    "DeploymentID",
    "ReplicaID",
    "TimeStampedValue",
    "ValidationError",
    "apply_app_level_autoscaling_config",
    "apply_autoscaling_config",
    "apply_delay_logic",
    "apply_scaling_factors",
    "default_autoscaling_policy",
    "deployment",
    "wrapped_replica_queue_length_autoscaling_policy",
]

CONTROL_LOOP_INTERVAL_S = 0.1
"""Ray's control-loop period, which Ray's tests simulate. The delays of both Ray
and SteadyServe are measured on the clock, so the period of the calls is free."""

DELAY_KEY = "__steadyserve_delay"

PEER_WORKDIR = Path(__file__).parent / "workdir"
"""The workdir the ported configs load from: it holds Ray's test module with
``fake_policy`` at Ray's path, as a SteadyServe version's workdir would."""

ValidationError = SpecError
"""Ray raises pydantic's ValidationError (a ValueError); SteadyServe a SpecError (one too)."""


class DeploymentID(NamedTuple):
    name: str
    app_name: str = "default"


class ReplicaID(NamedTuple):
    unique_id: str
    deployment_id: DeploymentID


class TimeStampedValue(NamedTuple):
    timestamp: float
    value: float


def _load(fields: dict[str, Any], notes: list[str] | None = None) -> ServiceSpec:
    service = {"autoscaling_config": fields}
    try:
        return parse_service(
            {"run": "x", "workdir": str(PEER_WORKDIR), "service": service},
            base_dir=PEER_WORKDIR,
            notes=notes,
        )
    except SpecError as exc:
        if "no module" in str(exc):  # Ray raises ModuleNotFoundError for the same mistake
            raise ModuleNotFoundError(str(exc)) from exc
        raise


def _warn_deprecations(spec: ServiceSpec) -> None:
    """SteadyServe's notices about Ray's deprecated fields, as Ray's DeprecationWarning."""
    from steadyserve.compat.skypilot import not_applicable_notes

    for note in not_applicable_notes(spec):
        if "deprecated" in note:
            warnings.warn(note, DeprecationWarning, stacklevel=3)


class _Policy:
    """``config.policy``: Ray's ``AutoscalingPolicy``."""

    def __init__(self, policy_function: str | None) -> None:
        self.policy_function = policy_function or DEFAULT_POLICY_FUNCTION

    def is_default_policy_function(self) -> bool:
        return self.policy_function == DEFAULT_POLICY_FUNCTION

    def get_policy(self) -> Callable[..., Any]:
        if self.is_default_policy_function():
            return default_autoscaling_policy
        raise NotImplementedError(
            "SteadyServe never imports a policy function into the caller's process"
        )


class AutoscalingConfig:
    """Ray's ``AutoscalingConfig(**fields)``: validated as ``service.autoscaling_config``
    at once and again after each attribute change (Ray's tests change fields)."""

    def __init__(self, **fields: Any) -> None:
        given = {k: v for k, v in fields.items() if v is not None}
        self.__dict__["_fields"] = given
        spec = _load(given)
        _warn_deprecations(spec)
        self.__dict__["_spec"] = spec

    @property
    def _replica_policy(self) -> Any:
        return self.__dict__["_spec"].service.replica_policy

    def steady_policy(self) -> OngoingPolicy:
        policy = policy_for(self.__dict__["_spec"].service)
        assert isinstance(policy, OngoingPolicy)
        return policy

    def fields(self) -> dict[str, Any]:
        return dict(self.__dict__["_fields"])

    def __getattr__(self, name: str) -> Any:
        if name == "policy":
            return _Policy(self._replica_policy.custom_policy_function())
        return getattr(self._replica_policy, name)

    def __setattr__(self, name: str, value: Any) -> None:
        fields = {**self.__dict__["_fields"], name: value}
        self.__dict__["_spec"] = _load({k: v for k, v in fields.items() if v is not None})
        self.__dict__["_fields"] = fields

    def get_target_ongoing_requests(self) -> float:
        return self.steady_policy().target_ongoing_requests

    def get_upscaling_factor(self) -> float:
        return self.steady_policy().up_gain

    def get_downscaling_factor(self) -> float:
        return self.steady_policy().down_gain


class DeploymentConfig:
    """Ray's ``DeploymentConfig`` as far as autoscaling goes: its proto bytes are
    SteadyServe's stored spec (``spec_json``), read back with ``from_json``."""

    def __init__(self, autoscaling_config: AutoscalingConfig | dict[str, Any] | None = None):
        if isinstance(autoscaling_config, dict):
            autoscaling_config = AutoscalingConfig(**autoscaling_config)
        self.spec = _load(autoscaling_config.fields() if autoscaling_config else {})

    @classmethod
    def from_default(cls, autoscaling_config: AutoscalingConfig) -> DeploymentConfig:
        return cls(autoscaling_config=autoscaling_config)

    def to_proto_bytes(self) -> bytes:
        return self.spec.spec_json().encode()

    @classmethod
    def from_proto_bytes(cls, data: bytes) -> DeploymentConfig:
        config = cls.__new__(cls)
        config.spec = ServiceSpec.from_json(data)
        _warn_deprecations(config.spec)
        return config

    @property
    def autoscaling_config(self) -> _StoredConfig:
        return _StoredConfig(self.spec)


class _StoredConfig:
    """``DeploymentConfig.autoscaling_config`` after a round trip: the stored policy."""

    def __init__(self, spec: ServiceSpec) -> None:
        stored = spec.service.replica_policy
        assert stored is not None
        self.downscale_delay_s = stored.downscale_delay_s
        self.policy = _Policy(stored.custom_policy_function())


def deployment(autoscaling_config: dict[str, Any]) -> Callable[[Any], Any]:
    """``@serve.deployment(autoscaling_config=...)``: the service file's block, loaded."""
    spec = _load(autoscaling_config)
    _warn_deprecations(spec)
    return lambda cls: cls


# ------------------------------------------------------------- policy layers


def _delay(policy_state: dict[str, Any] | None) -> ray_policy.RayDelay:
    saved = (policy_state or {}).get(DELAY_KEY)
    return ray_policy.RayDelay(*saved) if saved else ray_policy.RayDelay()


def _with_delay(state: dict[str, Any], delay: ray_policy.RayDelay) -> dict[str, Any]:
    return {**state, DELAY_KEY: (delay.direction, delay.since)}


def apply_scaling_factors(desired: float, current: int, config: AutoscalingConfig) -> int:
    return ray_policy.scaling_factors(desired, current, config.steady_policy())


def apply_delay_logic(
    desired_num_replicas: int,
    curr_target_num_replicas: int,
    config: AutoscalingConfig,
    policy_state: dict[str, Any],
    _now: float | None = None,
) -> tuple[int, dict[str, Any]]:
    now = time.time() if _now is None else _now
    count, delay = ray_policy.apply_delay(
        desired_num_replicas,
        curr_target_num_replicas,
        config.steady_policy(),
        _delay(policy_state),
        now,
    )
    return count, _with_delay(policy_state, delay)


def wrapped_replica_queue_length_autoscaling_policy(
    ctx: AutoscalingContext,
) -> tuple[int, dict[str, Any]]:
    """Ray's default policy under Ray's wrapper: SteadyServe's ``policy_step``."""
    step = ray_policy.policy_step(
        ctx.config.steady_policy(),
        ctx.current_num_replicas,
        ctx.total_num_requests,
        ctx.target_num_replicas,
        _delay(ctx.policy_state),
        time.time(),
    )
    if step.cold:
        return step.count, ctx.policy_state
    return step.count, _with_delay({}, step.delay)


default_autoscaling_policy = ray_policy.policy_step


def _defaults(ctx: AutoscalingContext, desired: float, user_state: dict[str, Any]) -> Any:
    step = ray_policy.apply_defaults(
        ctx.config.steady_policy(),
        desired,
        ctx.current_num_replicas,
        ctx.target_num_replicas,
        _delay(ctx.policy_state),
        time.time(),
    )
    return step.count, _with_delay(dict(user_state or {}), step.delay)


def _cold(ctx: AutoscalingContext) -> int | None:
    return ray_policy.cold_start(
        ctx.config.steady_policy(),
        ctx.current_num_replicas,
        ctx.total_num_requests,
        ctx.target_num_replicas,
    )


def apply_autoscaling_config(
    policy_func: Callable[[AutoscalingContext], tuple[float, dict[str, Any]]],
) -> Callable[[AutoscalingContext], tuple[int, dict[str, Any]]]:
    """Ray's ``_apply_autoscaling_config``: a custom policy's count through the
    cold start, the factors and the delays, as the controller runs a policy function."""

    def wrapped(ctx: AutoscalingContext) -> tuple[int, dict[str, Any]]:
        cold = _cold(ctx)
        if cold is not None:
            return cold, ctx.policy_state
        desired, user_state = policy_func(ctx)
        return _defaults(ctx, desired, user_state)  # type: ignore[no-any-return]

    return wrapped


def apply_app_level_autoscaling_config(
    policy_func: Callable[[dict[Any, AutoscalingContext]], tuple[dict[Any, float], Any]],
) -> Callable[[dict[Any, AutoscalingContext]], tuple[dict[Any, int], dict[Any, Any]]]:
    """Ray's ``_apply_app_level_autoscaling_config``: the same, per deployment."""

    def wrapped(
        contexts: dict[Any, AutoscalingContext],
    ) -> tuple[dict[Any, int], dict[Any, Any]]:
        desired, states = policy_func(contexts)
        states = states or {}
        decisions: dict[Any, int] = {}
        final: dict[Any, Any] = {}
        for key, ctx in contexts.items():
            if key not in desired:
                continue
            cold = _cold(ctx)
            if cold is not None:
                decisions[key], final[key] = cold, ctx.policy_state
            else:
                decisions[key], final[key] = _defaults(ctx, desired[key], states.get(key, {}))
        return decisions, final

    return wrapped
