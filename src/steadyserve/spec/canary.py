"""``service.canary``: the steps and thresholds of a canary update."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from steadyserve.spec.base import _Model
from steadyserve.spec.errors import _fail
from steadyserve.spec.fields import Fraction, NonNegativeInt, PositiveNumber, Seconds, Weight


class CanaryStep(_Model):
    """One step of a canary: shift ``weight`` percent of traffic, or ``pause`` seconds."""

    weight: Weight | None = None
    pause: Seconds | None = None

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
    """Requests the canary must have served before the thresholds are judged."""


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
