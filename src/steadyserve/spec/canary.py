"""``service.canary`` and ``service.blue_green``: the steps and thresholds of a
canary update, and the extras of a blue-green one (docs/canary.md)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictBool, field_validator, model_validator

from steadyserve.core.shadow.compare import normalise
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
    _header_name,
)

# The methods mirrored by default: the ones safe to send twice (RFC 9110 9.2.1).
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# A mirrored request's body is copied from the bytes the load balancer holds for a
# retry (lb/retry.py's HOLD_BYTES): a larger body is never held, so never mirrored.
MAX_MIRRORED_BODY = 256 * 1024


def _body_limit(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_MIRRORED_BODY:
        return value
    raise _fail(f"must be an integer from 0 to {MAX_MIRRORED_BODY} (bytes)")


def _pause(value: object) -> float | dict[str, Any]:
    """``pause: 60`` (seconds) or ``pause: {}`` (until ``steady promote``)."""
    if value == {} and isinstance(value, dict):
        return {}
    number = _finite(value)
    if number is not None and number >= 0:
        return number
    raise _fail("must be seconds >= 0, or {} to wait for steady promote")


def _share(value: object) -> int:
    """``shadow: N``: 1 to 100 percent of the requests mirrored."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100:
        return value
    raise _fail("must be an integer from 1 to 100 (percent of the requests mirrored)")


def _method(value: object) -> str:
    if isinstance(value, str) and value.isascii() and value.isalpha() and value == value.upper():
        return value
    raise _fail("must be an HTTP method in capitals (GET, POST...)")


def _json_path(value: object) -> str:
    try:
        return normalise(value)  # type: ignore[arg-type]
    except ValueError as exc:
        raise _fail(str(exc).replace("{", "{{").replace("}", "}}")) from None


def _lower_header(value: object) -> str:
    return _header_name(value).lower()


class CanaryStep(_Model):
    """One step of a canary: shift ``weight`` percent of traffic, pause ``pause``
    seconds (``pause: {}``: until ``steady promote``), or mirror ``shadow`` percent
    of the requests to the new version while clients get the stable answer."""

    weight: Weight | None = None
    pause: Annotated[float | dict[str, Any], BeforeValidator(_pause)] | None = None
    shadow: Annotated[int, BeforeValidator(_share)] | None = None

    @property
    def pause_s(self) -> float | None:
        """The pause in seconds; None for ``pause: {}`` (or a weight step)."""
        return self.pause if isinstance(self.pause, float) else None

    @model_validator(mode="after")
    def _one_kind(self) -> CanaryStep:
        kinds = [k for k in (self.weight, self.pause, self.shadow) if k is not None]
        if len(kinds) != 1:
            raise _fail("a step is one of weight: N, pause: seconds or shadow: N (exactly one)")
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
    max_shadow_diff_rate: Fraction | None = None
    """A shadow step: abort once more than this share of the compared answers differ."""
    min_shadow_compared: NonNegativeInt = 100
    """A shadow step walks on only after this many answers were compared."""


class ShadowPolicy(_Model):
    """``service.canary.shadow``: what a ``shadow:`` step mirrors and how it compares
    the two answers (docs/canary.md)."""

    methods: list[Annotated[str, BeforeValidator(_method)]] = Field(
        default_factory=lambda: list(SAFE_METHODS)
    )
    """Methods mirrored; only GET, HEAD and OPTIONS unless the file says so."""
    max_body_bytes: Annotated[int, BeforeValidator(_body_limit)] = 64 * 1024
    """A request with a larger body is not mirrored."""
    headers: list[Annotated[str, BeforeValidator(_lower_header)]] = Field(default_factory=list)
    """Response headers whose values must be equal."""
    ignore: list[Annotated[str, BeforeValidator(_json_path)]] = Field(default_factory=list)
    """JSON paths never counted as differing (``$.timestamp``, ``$.items[*].id``)."""
    noise_share: Fraction = 0.2
    """Share of the mirrored requests also asked of the stable version a second time,
    to learn which paths differ by nature; 0: no noise learning."""
    stream_tolerance: Fraction = 0.2
    """A streamed answer's length (events or bytes) may differ by this share."""


def _default_canary_steps() -> list[CanaryStep]:
    return [CanaryStep(weight=10), CanaryStep(pause=60.0), CanaryStep(weight=100)]


class CanaryPolicy(_Model):
    """Steps for ``update_mode: canary``; always present so ``--mode canary`` works
    on any service (the default in docs/design.md: 10%, wait a minute, 100%)."""

    steps: list[CanaryStep] = Field(default_factory=_default_canary_steps)
    analysis: CanaryAnalysis = Field(default_factory=CanaryAnalysis)
    shadow: ShadowPolicy = Field(default_factory=ShadowPolicy)

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
        first = next((i for i, s in enumerate(steps) if s.weight), len(steps))
        if any(s.shadow is not None for s in steps[first:]):
            raise _fail(
                "a shadow step must come before the first weight above 0 (once clients"
                " reach the new version there is nothing left to shadow)"
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
