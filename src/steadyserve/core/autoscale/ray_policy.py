"""Ray Serve's autoscaling policy, step for step (``ray/serve/autoscaling_policy.py``).

Ray splits a decision into layers, and so does this module, so that each layer
can be checked against Ray's own tests:

1. the desired count: Ray's default policy is ``total / target_ongoing_requests``
   spread over the running replicas (``running * error_ratio``), or a custom
   policy function's answer (controller/policy_runner.py runs it);
2. the scaling factors move the count from the running one toward the desired
   one (:func:`scaling_factors`);
3. the delays: a wish must hold, measured on the clock, for ``upscale_delay_s``
   (``downscale_delay_s``; ``downscale_to_zero_delay_s`` for 1 -> 0) before the
   target moves (:func:`apply_delay`);
4. the bounds ``[min_replicas, max_replicas]``, applied by the caller after the
   policy (Ray's ``get_decision_num_replicas``), not here.

A cold start (no replica running and requests waiting) skips 2 and 3. Pure: the
time is an argument, the state a value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from steadyserve.core.autoscale.policies import OngoingPolicy

__all__ = [
    "DELAY_EPS_S",
    "RayDelay",
    "RayStep",
    "apply_defaults",
    "apply_delay",
    "cold_start",
    "default_desired",
    "policy_step",
    "scaling_factors",
]

DELAY_EPS_S = 1e-6
"""Ray's tolerance on elapsed time: 400 s measured as 399.9999999999999 s still counts."""


@dataclass(frozen=True)
class RayDelay:
    """Ray's delay state: which way the policy has wanted to move, and since when."""

    direction: int = 0
    """+1: wants more than the target; -1: wants fewer; 0: neither."""
    since: float | None = None


@dataclass(frozen=True)
class RayStep:
    """One policy step, before bounds."""

    count: int
    """Ray's decision: the new target (unbounded), or the current one while a delay runs."""
    delay: RayDelay
    desired: int
    """What the policy asked for after the scaling factors (the count a delay waits to apply)."""
    delay_s: float = 0.0
    """The delay that applies to this wish (0 when none does)."""
    cold: bool = False
    """Started from zero at once (no replica running, requests waiting)."""


def scaling_factors(desired: float, current: int, policy: OngoingPolicy) -> int:
    """Ray's ``_apply_scaling_factors``: move from ``current`` toward ``desired``.

    ``ceil(current + factor * (desired - current))``, the factor being the
    upscaling one when the count rises. A factor below 1 that would leave the
    count where it is although fewer would do goes down by one, so low traffic
    always scales down. From zero the factor means nothing: the count is the
    desired one, rounded up.
    """
    if current == 0:
        return math.ceil(desired)
    delta = desired - current
    factor = policy.up_gain if delta > 0 else policy.down_gain
    scaled = math.ceil(current + factor * delta)
    if math.ceil(float(desired)) < current and scaled == current:
        scaled -= 1
    return scaled


def delay_for(policy: OngoingPolicy, target: int, direction: int) -> float:
    """The delay a wish in ``direction`` waits from ``target``."""
    if direction > 0:
        return policy.upscale_delay_s
    return policy.to_zero_delay_s if target == 1 else policy.downscale_delay_s


def apply_delay(
    desired: int, target: int, policy: OngoingPolicy, delay: RayDelay, now: float
) -> tuple[int, RayDelay]:
    """Ray's ``_apply_delay_logic``: the target moves to ``desired`` once the wish
    has held for its delay on the clock; a change of direction starts it again.
    Below the target, only 1 -> 0 goes to zero (with the to-zero delay)."""
    if desired == target:
        return target, RayDelay()
    direction = 1 if desired > target else -1
    since = delay.since if delay.direction == direction and delay.since is not None else now
    if direction < 0 and target != 1:
        desired = max(1, desired)
    if now - since + DELAY_EPS_S >= delay_for(policy, target, direction):
        return desired, RayDelay()
    return target, RayDelay(direction, since)


def cold_start(policy: OngoingPolicy, current: int, total: float, target: int) -> int | None:
    """Ray's cold-start fast path: nothing running and requests waiting: at least
    ``ceil(upscaling_factor)`` replicas at once (or the target, if higher)."""
    if current == 0 and total > 0:
        return max(math.ceil(1 * policy.up_gain), target)
    return None


def default_desired(policy: OngoingPolicy, current: int, total: float, target: int) -> float:
    """Ray's default policy: ``running * total / (target_ongoing_requests * running)``;
    with none running (they are starting) it holds the target."""
    if current == 0:
        return float(target)
    error_ratio = total / (policy.target_ongoing_requests * current)
    return current * error_ratio


def apply_defaults(
    policy: OngoingPolicy,
    desired: float,
    current: int,
    target: int,
    delay: RayDelay,
    now: float,
) -> RayStep:
    """Ray's ``_apply_default_params``: scaling factors, then the delays (a rise
    from zero running goes at once)."""
    scaled = scaling_factors(desired, current, policy)
    if current == 0 and scaled > 0:
        return RayStep(scaled, delay, scaled, cold=True)
    wish = max(0, scaled)
    count, next_delay = apply_delay(wish, target, policy, delay, now)
    direction = 0 if wish == target else (1 if wish > target else -1)
    shown = wish if direction >= 0 or target == 1 else max(1, wish)
    return RayStep(count, next_delay, shown, delay_for(policy, target, direction))


def policy_step(
    policy: OngoingPolicy,
    current: int,
    total: float,
    target: int,
    delay: RayDelay,
    now: float,
    desired: float | None = None,
) -> RayStep:
    """One decision of Ray's policy, wrapped as Ray wraps it
    (``_apply_autoscaling_config``): the cold start first, then the desired count
    (the default policy's, or ``desired`` from a custom policy function) through
    the scaling factors and the delays. Unbounded: the caller clips."""
    cold = cold_start(policy, current, total, target)
    if cold is not None:
        return RayStep(cold, delay, cold, cold=True)
    wanted = default_desired(policy, current, total, target) if desired is None else desired
    return apply_defaults(policy, wanted, current, target, delay, now)
