"""``@deployment``: Ray Serve's ``@serve.deployment`` for SteadyServe classes, and the
options it records: what user code, the runner and (through ``--describe``) the CLI
agree on, so it sits with the other formats both sides import, below ``replica/`` and
``serve/`` alike.

The decorator only records defaults on the class and hands the class back, so
the class stays a plain class (tests and notebooks construct it directly). The
CLI reads the recorded options through ``--describe`` and merges them under the
service file, which always wins; the runner reads them for its own settings
(``max_ongoing_requests``, timeouts, the default ``user_config``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar, overload

C = TypeVar("C", bound=type)

OPTIONS_ATTRIBUTE = "__steadyserve_deployment__"


@dataclass(frozen=True)
class DeploymentOptions:
    """Defaults a decorated class carries; ``None`` means "not set here"."""

    num_replicas: int | None = None
    user_config: Any = None
    max_ongoing_requests: int | None = None
    health_check_period_s: float | None = None
    health_check_timeout_s: float | None = None
    graceful_shutdown_wait_loop_s: float | None = None
    graceful_shutdown_timeout_s: float | None = None

    def __post_init__(self) -> None:
        _check_int("num_replicas", self.num_replicas, minimum=1)
        _check_int("max_ongoing_requests", self.max_ongoing_requests, minimum=1)
        _check_seconds("health_check_period_s", self.health_check_period_s, allow_zero=False)
        _check_seconds("health_check_timeout_s", self.health_check_timeout_s, allow_zero=False)
        _check_seconds(
            "graceful_shutdown_wait_loop_s", self.graceful_shutdown_wait_loop_s, allow_zero=False
        )
        _check_seconds(
            "graceful_shutdown_timeout_s", self.graceful_shutdown_timeout_s, allow_zero=True
        )
        if self.user_config is not None:
            try:
                json.dumps(self.user_config, allow_nan=False)
            except (TypeError, ValueError) as exc:
                message = f"deployment(user_config=...): not JSON-serializable ({exc})"
                raise ValueError(message) from None

    def as_dict(self) -> dict[str, Any]:
        """Only the options the decorator was given: what the CLI merges into a spec."""
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {name: value for name, value in values if value is not None}


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"deployment({name}={value!r}): must be an integer >= {minimum}")


def _check_seconds(name: str, value: object, *, allow_zero: bool) -> None:
    if value is None:
        return
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"deployment({name}={value!r}): must be a number of seconds {bound}")


@overload
def deployment(cls: C, /) -> C: ...


@overload
def deployment(
    *,
    num_replicas: int | None = None,
    user_config: Any = None,
    max_ongoing_requests: int | None = None,
    health_check_period_s: float | None = None,
    health_check_timeout_s: float | None = None,
    graceful_shutdown_wait_loop_s: float | None = None,
    graceful_shutdown_timeout_s: float | None = None,
) -> Callable[[C], C]: ...


def deployment(
    cls: type | None = None,
    /,
    *,
    num_replicas: int | None = None,
    user_config: Any = None,
    max_ongoing_requests: int | None = None,
    health_check_period_s: float | None = None,
    health_check_timeout_s: float | None = None,
    graceful_shutdown_wait_loop_s: float | None = None,
    graceful_shutdown_timeout_s: float | None = None,
) -> Any:
    """Mark a class as a SteadyServe deployment, bare (``@deployment``) or with
    defaults (``@deployment(num_replicas=2, user_config={...})``).

    Options are checked here, at import time, so a bad value fails ``steady up``
    (through ``--describe``) rather than every replica."""
    options = DeploymentOptions(
        num_replicas=num_replicas,
        user_config=user_config,
        max_ongoing_requests=max_ongoing_requests,
        health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s,
        graceful_shutdown_wait_loop_s=graceful_shutdown_wait_loop_s,
        graceful_shutdown_timeout_s=graceful_shutdown_timeout_s,
    )

    def mark(target: C) -> C:
        if not isinstance(target, type):
            raise TypeError(
                f"@deployment decorates a class with __call__(self, request), "
                f"not {type(target).__name__}"
            )
        setattr(target, OPTIONS_ATTRIBUTE, options)
        return target

    if cls is None:
        return mark
    return mark(cls)


def options_of(cls: type) -> DeploymentOptions | None:
    """The options ``@deployment`` put on this very class (not inherited: a
    subclass is a different deployment until it is decorated itself)."""
    options = vars(cls).get(OPTIONS_ATTRIBUTE)
    return options if isinstance(options, DeploymentOptions) else None
