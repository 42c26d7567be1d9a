"""SkyServe's request-rate autoscaler, step for step (``sky/serve/autoscalers.py``).

SkyServe decides once a decision interval (20 s; 5 s while the service wants
no replica at all), not on every tick. A decision compares what the rate asks
for with the target: a wish to scale up (down) must be made on
``int(upscale_delay_seconds / interval)`` consecutive decisions
(``downscale_delay_seconds``) before the target moves; one decision the other
way, or at the target, starts the count again. A target of 0 moves at once.
With a 40 s delay and a 20 s interval the target moves on the second decision
that wants it. ``num_overprovision`` replicas run beyond the target.

Pure: the time is an argument, the counts are values.
"""

from __future__ import annotations

from dataclasses import dataclass

from steadyserve.core.autoscale.policies import QpsPolicy

__all__ = [
    "DEFAULT_DECISION_INTERVAL_S",
    "NO_REPLICA_DECISION_INTERVAL_S",
    "SkyCounts",
    "SkyStep",
    "decision_interval",
    "final_target",
    "hysteresis",
    "thresholds",
]

DEFAULT_DECISION_INTERVAL_S = 20.0
"""SkyServe's ``AUTOSCALER_DEFAULT_DECISION_INTERVAL_SECONDS``."""
NO_REPLICA_DECISION_INTERVAL_S = 5.0
"""SkyServe's ``AUTOSCALER_NO_REPLICA_DECISION_INTERVAL_SECONDS``: decide faster at zero."""


@dataclass(frozen=True)
class SkyCounts:
    """SkyServe's hysteresis counters."""

    up: int = 0
    down: int = 0


@dataclass(frozen=True)
class SkyStep:
    target: int
    counts: SkyCounts
    desired: int
    """What the rate asks for (within the bounds)."""
    needed: int = 0
    """Consecutive decisions the pending wish needs (0 when none is pending)."""


def thresholds(policy: QpsPolicy) -> tuple[int, int]:
    """Consecutive decisions before scaling up and down: SkyServe's
    ``int(delay / decision interval)``."""
    interval = policy.decision_interval_s
    return (
        int(policy.upscale_delay_seconds / interval),
        int(policy.downscale_delay_seconds / interval),
    )


def final_target(policy: QpsPolicy, target: int) -> int:
    """SkyServe's ``get_final_target_num_replicas``: the target plus ``num_overprovision``."""
    return target + policy.num_overprovision


def decision_interval(policy: QpsPolicy, target: int) -> float:
    """SkyServe's ``get_decision_interval``: the faster interval while the final
    target is 0 (never slower than the configured interval)."""
    if final_target(policy, target) == 0:
        return min(NO_REPLICA_DECISION_INTERVAL_S, policy.decision_interval_s)
    return policy.decision_interval_s


def hysteresis(policy: QpsPolicy, target: int, counts: SkyCounts, desired: int) -> SkyStep:
    """SkyServe's ``_set_target_num_replicas_with_hysteresis`` when the rate asks for
    ``desired`` replicas (within the bounds): ``ceil(rate / target)``, or by the
    replicas' capacity with a per-accelerator target (instance_aware.py)."""
    up_after, down_after = thresholds(policy)
    if target == 0:
        return SkyStep(desired, counts, desired)
    if desired > target:
        up = counts.up + 1
        if up >= up_after:
            return SkyStep(desired, SkyCounts(), desired)
        return SkyStep(target, SkyCounts(up=up), desired, up_after)
    if desired < target:
        down = counts.down + 1
        if down >= down_after:
            return SkyStep(desired, SkyCounts(), desired)
        return SkyStep(target, SkyCounts(down=down), desired, down_after)
    return SkyStep(target, SkyCounts(), desired)
