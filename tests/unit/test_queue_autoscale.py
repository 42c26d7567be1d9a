"""A pool's autoscaler on simulated time: SkyPilot's QueueLengthAutoscaler rule
(sky/serve/autoscalers.py), its bounds and its delays."""

from __future__ import annotations

from steadyserve.core.autoscale.queue import QueuePolicy, QueueState, start, step, wish

POLICY = QueuePolicy(floor=0, ceiling=3, threshold=1, upscale_delay_s=10, downscale_delay_s=10)


def run(
    policy: QueuePolicy, state: QueueState, pending: int, start_s: float, end_s: float
) -> QueueState:
    """Steps every second from ``start_s`` to ``end_s`` with the same queue."""
    now = start_s
    while now <= end_s:
        state = step(policy, state, pending, now)
        now += 1.0
    return state


def test_skypilots_rule() -> None:
    assert wish(POLICY, 1, pending=0) == 0  # an empty queue: down to the floor at once
    assert wish(POLICY, 1, pending=3) == 2  # more than the threshold: one more
    assert wish(POLICY, 2, pending=1) == 2  # the threshold: no change
    high = QueuePolicy(floor=0, ceiling=9, threshold=5, upscale_delay_s=0, downscale_delay_s=0)
    assert wish(high, 3, pending=2) == 2  # fewer than the threshold: one less
    assert wish(high, 1, pending=2) == 1  # never zero while jobs wait
    assert wish(POLICY, 3, pending=9) == 3  # the ceiling
    assert wish(QueuePolicy(2, 5, 1, 0, 0), 2, pending=0) == 2  # the floor


def test_the_worked_example() -> None:
    """Threshold 1, delays 10 s, bounds 0..3, from 1 worker: 3 pending jobs add one
    worker each 10 s up to 3; an empty queue goes to 0 after 10 s."""
    state = QueueState(target=1)
    state = run(POLICY, state, 3, 0, 9)
    assert state.target == 1  # the wish held 9 s: not yet
    state = run(POLICY, state, 3, 10, 10)
    assert state.target == 2
    state = run(POLICY, state, 3, 11, 21)
    assert state.target == 3
    state = run(POLICY, state, 3, 22, 60)
    assert state.target == 3  # the ceiling holds
    state = run(POLICY, state, 0, 61, 70)
    assert state.target == 3
    state = run(POLICY, state, 0, 71, 71)
    assert state.target == 0


def test_a_wish_that_stops_holding_starts_its_wait_again() -> None:
    state = run(POLICY, QueueState(target=1), 3, 0, 8)
    state = step(POLICY, state, 1, 9)  # the threshold: no wish, the wait is over
    state = run(POLICY, state, 3, 10, 19)
    assert state.target == 1
    assert run(POLICY, state, 3, 20, 20).target == 2


def test_a_fixed_pool_keeps_its_size() -> None:
    fixed = QueuePolicy(floor=2, ceiling=2, threshold=1, upscale_delay_s=0, downscale_delay_s=0)
    state = start(fixed)
    assert state.target == 2
    assert run(fixed, state, 50, 0, 5).target == 2
    assert run(fixed, state, 0, 0, 5).target == 2


def test_no_delay_scales_at_once() -> None:
    eager = QueuePolicy(floor=1, ceiling=4, threshold=1, upscale_delay_s=0, downscale_delay_s=0)
    assert step(eager, start(eager), 5, 0.0).target == 2
