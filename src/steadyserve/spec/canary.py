"""``service.canary`` and ``service.blue_green``: the steps and thresholds of a
canary update, and the extras of a blue-green one (docs/canary.md)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictBool, field_validator, model_validator

from steadyserve.spec.base import _Model
from steadyserve.spec.errors import _fail
from steadyserve.spec.fields import (
    Fraction,
    NonNegativeInt,
    PortNumber,
    PositiveInt,
    PositiveNumber,
    PositiveSeconds,
    Seconds,
    Weight,
    _finite,
)


def _pause(value: object) -> float | dict[str, Any]:
    """``pause: 60`` (seconds) or ``pause: {}`` (until ``steady promote``)."""
    if value == {} and isinstance(value, dict):
        return {}
    number = _finite(value)
    if number is not None and number >= 0:
        return number
    raise _fail("must be seconds >= 0, or {} to wait for steady promote")


class CanaryStep(_Model):
    """One step of a canary: shift ``weight`` percent of traffic, or pause: ``pause``
    seconds, or ``pause: {}`` until ``steady promote``."""

    weight: Weight | None = None
    pause: Annotated[float | dict[str, Any], BeforeValidator(_pause)] | None = None

    @property
    def pause_s(self) -> float | None:
        """The pause in seconds; None for ``pause: {}`` (or a weight step)."""
        return self.pause if isinstance(self.pause, float) else None

    @model_validator(mode="after")
    def _one_kind(self) -> CanaryStep:
        if (self.weight is None) == (self.pause is None):
            raise _fail("a step is either weight: N or pause: seconds (exactly one)")
        return self


class CanaryAnalysis(_Model):
    """Thresholds that fail a canary step; an unset threshold is not checked."""

    max_error_rate: Fraction | None = None
    max_p99_latency_ms: PositiveNumber | None = None
    min_requests: NonNegativeInt = 100
    """Requests the canary must have served in the window before the thresholds are judged."""
    max_error_rate_increase: Fraction | None = None
    """Fail when the canary's error rate exceeds the stable version's by more than this."""
    max_p99_ratio: PositiveNumber | None = None
    """Fail when the canary's p99 exceeds the stable version's p99 times this."""
    max_p99_ttfb_ms: PositiveNumber | None = None
    """Fail when the canary's p99 time to first byte (an LLM's first token) exceeds this."""
    interval_s: PositiveSeconds = 10.0
    """The sliding window and the time between two checks."""
    failure_limit: PositiveInt = 1
    """Failed checks in a row that abort the canary."""


def _default_canary_steps() -> list[CanaryStep]:
    return [CanaryStep(weight=10), CanaryStep(pause=60.0), CanaryStep(weight=100)]


class CanaryPolicy(_Model):
    """Steps for ``update_mode: canary``; always present so ``--mode canary`` works
    on any service (the default in docs/design.md: 10%, wait a minute, 100%)."""

    steps: list[CanaryStep] = Field(default_factory=_default_canary_steps)
    analysis: CanaryAnalysis = Field(default_factory=CanaryAnalysis)

    @field_validator("steps")
    @classmethod
    def _ends_at_full_weight(cls, steps: list[CanaryStep]) -> list[CanaryStep]:
        if not steps:
            raise _fail("must not be empty")
        weights = [step.weight for step in steps if step.weight is not None]
        if not weights or weights[-1] != 100:
            raise _fail(
                "the last weight must be 100 (a canary ends with all traffic on the new version)"
            )
        return steps


class BlueGreenPolicy(_Model):
    """``service.blue_green:``: for updates in ``blue_green`` mode, a preview of the
    new version on its own port, a switch that waits for ``steady promote``, and
    the old version kept warm after the switch (docs/canary.md)."""

    preview_port: PortNumber | None = None
    """While a blue-green update runs, this port serves only the new version."""
    auto_promote: StrictBool = True
    """False: all new replicas READY, the switch waits for ``steady promote``."""
    scale_down_delay_s: Seconds = 0.0
    """The old version stays up (out of routing) this long after the switch, so
    ``steady abort`` is one route-table change."""
