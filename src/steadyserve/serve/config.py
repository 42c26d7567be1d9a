"""``ray.serve.config``'s ``AutoscalingConfig`` and ``AutoscalingPolicy``: Ray's
objects for ``autoscaling_config``, taken wherever Ray takes its dict.

Ray checks them with pydantic; here they carry the fields to the same checks a
``serve_config.yaml`` gets (spec/autoscaling.py), once ``serve.run`` or a config
deploy turns them into the service file. ``policy_function`` is an import path
(``module:function``) or, as in Ray, the function itself: ``serve.run`` ships a
callable with the application (serve/policies.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from steadyserve.spec.autoscaling import DEFAULT_POLICY_FUNCTION

__all__ = ["AutoscalingConfig", "AutoscalingPolicy", "as_options"]


class AutoscalingPolicy:
    """Ray's ``AutoscalingPolicy(policy_function=...)``: the custom policy, a
    function of an ``AutoscalingContext`` returning ``(replicas, policy_state)``."""

    def __init__(self, policy_function: str | Callable[..., Any] = DEFAULT_POLICY_FUNCTION):
        if not isinstance(policy_function, str) and not callable(policy_function):
            raise TypeError(
                "AutoscalingPolicy(policy_function=...): must be an import path or a callable,"
                f" not {type(policy_function).__name__}"
            )
        self.policy_function = policy_function

    def as_dict(self) -> dict[str, Any]:
        return {"policy_function": self.policy_function}

    def __repr__(self) -> str:
        return f"AutoscalingPolicy(policy_function={self.policy_function!r})"


class AutoscalingConfig:
    """Ray's ``AutoscalingConfig(min_replicas=..., ..., policy=...)``; its fields are
    checked, as every ``autoscaling_config``, when the application is deployed."""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("_fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    def as_dict(self) -> dict[str, Any]:
        return _policy_as_dict(self._fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._fields.items())
        return f"AutoscalingConfig({inner})"


def as_options(config: Any) -> Any:
    """``autoscaling_config`` as the dict a ``serve_config.yaml`` holds (its policy a
    dict too); anything else is returned as is, for the option checks to refuse."""
    if isinstance(config, AutoscalingConfig):
        return config.as_dict()
    return _policy_as_dict(config) if isinstance(config, dict) else config


def _policy_as_dict(config: dict[str, Any]) -> dict[str, Any]:
    policy = config.get("policy")
    if isinstance(policy, AutoscalingPolicy):
        return {**config, "policy": policy.as_dict()}
    return dict(config)
