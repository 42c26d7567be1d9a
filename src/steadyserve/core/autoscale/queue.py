"""A pool's autoscaler: SkyPilot's QueueLengthAutoscaler, step for step, pure.

A pool with ``max_workers`` sizes itself on its queue of pending jobs
(``sky/serve/autoscalers.py``, QueueLengthAutoscaler): no pending job wants
no worker (then ``min_workers``), more pending jobs than
``queue_length_threshold`` wants one worker more than now, fewer one less,
exactly the threshold no change; a queue that is not empty never wants zero.
The wish is clipped to ``[min_workers, max_workers]`` and only taken once it
has held for ``upscale_delay_seconds`` (or ``downscale_delay_seconds``), as
SkyPilot's hysteresis counts decisions; here it is time, on the ``now`` the
caller passes (no clock of its own).

Worked example (threshold 1, delays 10 s, bounds 0..3, target 1): 3 pending
jobs at t=0 wish for 2; still 3 at t=10, the target is 2, and the wish for 3
waits its own 10 s (3 at t=21, stepping each second); the ceiling holds after.
The queue empties at t=61: the wish is 0, taken 10 s later.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueuePolicy:
    floor: int
    ceiling: int
    threshold: int
    upscale_delay_s: float
    downscale_delay_s: float


@dataclass(frozen=True)
class QueueState:
    target: int
    wish_since: float | None = None
    """When the wish to move ``direction`` (+1 up, -1 down) first held."""
    direction: int = 0


def wish(policy: QueuePolicy, target: int, pending: int) -> int:
    """The worker count SkyPilot's rule asks for now, clipped to the bounds."""
    if pending == 0:
        wanted = 0
    elif pending > policy.threshold:
        wanted = target + 1
    elif pending < policy.threshold:
        wanted = target - 1
    else:
        wanted = target
    if wanted == 0 and pending > 0:
        wanted = 1  # jobs wait: never scale to zero under them
    return max(policy.floor, min(wanted, policy.ceiling))


def start(policy: QueuePolicy) -> QueueState:
    """A new pool starts at its floor, as SkyPilot's starts at ``min_replicas``."""
    return QueueState(target=policy.floor)


def step(policy: QueuePolicy, state: QueueState, pending: int, now: float) -> QueueState:
    """One decision: the next state from the queue's length at ``now``."""
    target = max(policy.floor, min(state.target, policy.ceiling))  # bounds may have changed
    wanted = wish(policy, target, pending)
    if wanted == target:
        return QueueState(target=target)
    direction = 1 if wanted > target else -1
    delay = policy.upscale_delay_s if direction > 0 else policy.downscale_delay_s
    waiting = state.wish_since is not None and state.direction == direction
    since = state.wish_since if waiting and state.wish_since is not None else now
    if now - since >= delay:
        return QueueState(target=wanted)
    return QueueState(target=target, wish_since=since, direction=direction)
