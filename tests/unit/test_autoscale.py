"""The autoscaler's pure core, driven with simulated time: every test feeds load
samples at chosen instants and calls decide() with that instant, so hours of
traffic run in milliseconds and nothing sleeps."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.core.autoscale import (
    Candidate,
    Decision,
    FixedPolicy,
    LoadSample,
    LoadWindow,
    OngoingPolicy,
    Policy,
    QpsPolicy,
    ReplicaLoad,
    ScaleState,
    choose_victims,
    decide,
    initial_state,
    mean_ongoing,
    ongoing_desired,
    qps,
    qps_desired,
    request_waiting_at_zero,
)
from steadyserve.spec import ServiceSection, parse_service
from steadyserve.spec.autoscaling import policy_for

# ------------------------------------------------------------------- simulation


def load(t: float, *, ongoing: float = 0.0, started: int = 0, queued: int = 0) -> LoadSample:
    """A report at ``t`` whose ongoing total is ``ongoing`` (plus ``queued``)."""
    return LoadSample(t, (ReplicaLoad(1, started=started, ongoing=ongoing),), queued=queued)


@dataclass
class Tick:
    t: float
    running: int
    decision: Decision


def simulate(
    policy: Policy,
    traffic: Callable[[float], LoadSample],
    *,
    until: float,
    state: ScaleState | None = None,
    start: float = 0.0,
    step: float = 1.0,
    running: Callable[[int], int] = lambda target: target,
) -> list[Tick]:
    """Ticks every ``step`` s: one report, one decision. Serving replicas follow the
    target at once (``running`` maps the previous target to the serving count)."""
    state = state or initial_state(policy)
    window = LoadWindow(span=getattr(policy, "window_s", 60.0))
    ticks: list[Tick] = []
    steps = round((until - start) / step)
    for i in range(steps + 1):
        t = start + i * step
        serving = running(state.target)
        window.add(traffic(t))
        decision = decide(policy, state, window, t, serving)
        assert policy.min_replicas <= decision.target <= policy.max_replicas
        ticks.append(Tick(t, serving, decision))
        state = decision.next_state
    return ticks


def targets(ticks: list[Tick]) -> list[int]:
    return [tick.decision.target for tick in ticks]


def changes(ticks: list[Tick]) -> list[tuple[float, int, str]]:
    return [(k.t, k.decision.target, k.decision.reason) for k in ticks if k.decision.changed]


def first(ticks: list[Tick], text: str) -> float:
    return next(k.t for k in ticks if text in k.decision.reason)


# ------------------------------------------------------------------------ signals


def test_replica_reported_ongoing_is_preferred_over_in_flight() -> None:
    sample = LoadSample(
        5.0,
        (
            ReplicaLoad(1, started=3, in_flight=4, ongoing=2.5),
            ReplicaLoad(2, started=1, in_flight=3),
        ),
        queued=2,
    )
    assert sample.started == 4
    assert sample.ongoing == 2.5 + 3 + 2


def test_window_trims_by_time_and_stays_bounded() -> None:
    window = LoadWindow(span=10.0)
    for i in range(10_000):
        window.add(load(i * 0.5, started=1))
    assert len(window) == 20  # (4989.5, 4999.5]: ten seconds of half-second reports
    assert min(s.time for s in window) == 4990.0


def test_window_keeps_time_order_for_late_reports() -> None:
    window = LoadWindow(span=60.0)
    for t in (1.0, 3.0, 2.0, 0.5):
        window.add(load(t))
    assert [s.time for s in window] == [0.5, 1.0, 2.0, 3.0]
    assert [s.time for s in window.between(1.0, 3.0)] == [2.0, 3.0]


def test_window_count_backstop_and_resize() -> None:
    window = LoadWindow(span=100.0, max_samples=5)
    for i in range(50):
        window.add(load(float(i)))
    assert [s.time for s in window] == [45.0, 46.0, 47.0, 48.0, 49.0]
    window.resize(2.0)
    assert [s.time for s in window] == [48.0, 49.0]
    with pytest.raises(ValueError):
        LoadWindow(span=0)


def test_qps_divides_by_the_whole_window_like_skyserve() -> None:
    # 30 requests in the first 5 s of a service's life are 0.5 qps over 60 s, not 6.
    samples = [load(float(t), started=6) for t in range(1, 6)]
    assert qps(samples, 60.0) == 0.5
    assert mean_ongoing([]) == 0.0
    assert mean_ongoing([load(1, ongoing=1), load(2, ongoing=4)]) == 2.5


# ------------------------------------------------------------- desired counts


def test_qps_desired_is_ceil_of_rate_over_target_clipped() -> None:
    policy = QpsPolicy(min_replicas=1, max_replicas=10, target_qps_per_replica=2.5)
    assert [qps_desired(policy, r) for r in (0, 2.5, 2.6, 10, 100)] == [1, 1, 2, 4, 10]


@pytest.mark.parametrize(
    ("ongoing", "running", "target", "up", "down", "expected"),
    [
        (10.0, 2, 2.0, None, None, 5),  # ratio 2.5 on 2 replicas -> 5
        (10.0, 2, 2.0, 0.5, None, 4),  # half the step: 2 * (1 + 1.5 * 0.5) = 3.5 -> 4
        (4.0, 2, 2.0, None, None, 2),  # exactly at target
        (1.0, 4, 2.0, None, None, 1),
        (1.0, 4, 2.0, None, 0.5, 3),  # 4 * (1 - 0.875 * 0.5) = 2.25 -> 3
        (2.0, 3, 1.0, None, 0.1, 2),  # stuck at 3 by the factor, but 2 would do: one fewer
        (0.0, 1, 2.0, None, 0.5, 0),  # idle single replica: zero (min_replicas 0)
    ],
)
def test_ongoing_desired_follows_ray_serve(
    ongoing: float,
    running: int,
    target: float,
    up: float | None,
    down: float | None,
    expected: int,
) -> None:
    policy = OngoingPolicy(
        min_replicas=0,
        max_replicas=20,
        target_ongoing_requests=target,
        upscaling_factor=up,
        downscaling_factor=down,
    )
    assert ongoing_desired(policy, ongoing, running) == expected


def test_ongoing_desired_needs_a_running_replica() -> None:
    with pytest.raises(ValueError):
        ongoing_desired(OngoingPolicy(), 1.0, 0)


# ------------------------------------------------------------------ SkyServe's


SKY = QpsPolicy(min_replicas=1, max_replicas=10, target_qps_per_replica=2.5)


def test_qps_upscale_acts_on_the_delay_over_interval_th_consecutive_decision() -> None:
    # 4 rps on one replica of 2.5: more than one replica's worth. SkyServe decides
    # every 20 s and acts on the int(300 / 20) = 15th decision that wants more,
    # 14 intervals after the first.
    ticks = simulate(SKY, lambda t: load(t, started=4), until=400)
    wish = first(ticks, "upscale delay")
    (when, target, reason), *rest = changes(ticks)
    assert when - wish == 14 * 20.0
    assert target == 2 and not rest
    assert reason == "qps 4.0 over 60 s / target 2.5 -> 2 replicas"
    assert set(targets(ticks)[: int(when)]) == {1}


def test_qps_downscale_acts_on_the_delay_over_interval_th_consecutive_decision() -> None:
    ticks = simulate(SKY, lambda t: load(t, started=1), until=1400, state=ScaleState(target=6))
    (when, target, _), *rest = changes(ticks)
    assert target == 1 and not rest
    assert when - first(ticks, "downscale delay") == (1200 / 20 - 1) * 20.0
    # Between decisions nothing is judged: one decision every 20 s.
    assert sum(1 for k in ticks if k.decision.decided and k.t < 100) == 5


def test_qps_spike_shorter_than_the_delay_changes_nothing() -> None:
    # 2 rps, then 4 rps for 40 s: one replica's 2.5 qps is exceeded over the 60 s
    # window for about 80 s, far less than the 300 s upscale delay; and 4 rps over
    # 6 s is below twice the capacity (5 qps), so no burst either.
    def traffic(t: float) -> LoadSample:
        return load(t, started=4 if 100 <= t < 140 else 2)

    ticks = simulate(SKY, traffic, until=2000)
    assert changes(ticks) == []
    assert any("upscale delay" in k.decision.reason for k in ticks)  # it did want more


def test_qps_scales_from_zero_at_once() -> None:
    policy = QpsPolicy(min_replicas=0, max_replicas=5, target_qps_per_replica=1)
    ticks = simulate(
        policy,
        lambda t: load(t, started=1 if t >= 10 else 0),
        until=12,
        state=ScaleState(target=0),
    )
    assert changes(ticks) == [(10.0, 1, "qps 0.017 over 60 s / target 1 -> 1 replica (from zero)")]


def test_qps_idle_goes_to_zero_after_the_downscale_delay() -> None:
    policy = QpsPolicy(min_replicas=0, max_replicas=5, target_qps_per_replica=1)
    ticks = simulate(policy, lambda t: load(t), until=1300, state=ScaleState(1))
    assert changes(ticks) == [(1180.0, 0, "qps 0.0 over 60 s / target 1 -> 0 replicas")]


def test_qps_decides_faster_at_zero_and_overprovisions() -> None:
    policy = QpsPolicy(
        min_replicas=0, max_replicas=5, target_qps_per_replica=1, decision_interval_s=1
    )
    ticks = simulate(policy, lambda t: load(t), until=3, state=ScaleState(0))
    assert all(k.decision.decided for k in ticks)  # min(5, 1) s at zero
    slow = QpsPolicy(min_replicas=0, max_replicas=5, target_qps_per_replica=1)
    ticks = simulate(slow, lambda t: load(t), until=12, state=ScaleState(0))
    assert [k.t for k in ticks if k.decision.decided] == [0.0, 5.0, 10.0]


# ---------------------------------------------------------------- Ray Serve's


RAY = OngoingPolicy(min_replicas=1, max_replicas=10, target_ongoing_requests=2)


def test_ongoing_upscale_waits_upscale_delay_s() -> None:
    # 3.5 ongoing on one replica wants two; 3.5 < 2 x 2, so not a burst.
    ticks = simulate(RAY, lambda t: load(t, ongoing=3.5), until=100)
    assert changes(ticks) == [(30.0, 2, "ongoing 3.5 over 30 s / target 2 -> 2 replicas")]


def test_ongoing_downscale_waits_downscale_delay_s() -> None:
    ticks = simulate(RAY, lambda t: load(t, ongoing=1), until=700, state=ScaleState(4))
    assert changes(ticks) == [(600.0, 1, "ongoing 1.0 over 30 s / target 2 -> 1 replica")]


def test_factors_take_partial_steps() -> None:
    policy = OngoingPolicy(
        min_replicas=1,
        max_replicas=20,
        target_ongoing_requests=1,
        upscale_delay_s=0,
        downscale_delay_s=0,
        look_back_period_s=1,
        upscaling_factor=0.5,
        downscaling_factor=0.5,
    )
    # 1.9 per replica on 4 replicas is below burst (2x), so the factor applies.
    ups = simulate(policy, lambda t: load(t, ongoing=7.6), until=10, state=ScaleState(4))
    assert targets(ups)[:3] == [6, 7, 8]  # 4 * (1 + 0.9 * 0.5) = 5.8 -> 6, then smaller steps
    downs = simulate(policy, lambda t: load(t, ongoing=2), until=10, state=ScaleState(8))
    assert targets(downs)[:4] == [5, 4, 3, 2]  # ceil(8 * 0.625) = 5, ...
    assert targets(downs)[-1] == 2


def test_initial_replicas_is_the_starting_target() -> None:
    policy = OngoingPolicy(min_replicas=1, max_replicas=10, initial_replicas=4)
    assert initial_state(policy) == ScaleState(target=4)
    assert initial_state(RAY).target == 1
    assert initial_state(SKY).target == 1
    assert initial_state(FixedPolicy(3)).target == 3


def test_ongoing_idle_goes_to_one_then_to_zero_after_its_own_delay() -> None:
    policy = OngoingPolicy(
        min_replicas=0,
        max_replicas=5,
        downscale_delay_s=100,
        downscale_to_zero_delay_s=40,
    )
    ticks = simulate(policy, lambda t: load(t), until=200, state=ScaleState(3))
    # Ray Serve goes to zero only from one replica: 3 -> 1 after 100 s, 1 -> 0 after 40 more.
    assert [(t, n) for t, n, _ in changes(ticks)] == [(100.0, 1), (141.0, 0)]


def test_downscale_to_zero_delay_defaults_to_downscale_delay() -> None:
    policy = OngoingPolicy(min_replicas=0, max_replicas=5, downscale_delay_s=50)
    ticks = simulate(policy, lambda t: load(t), until=100, state=ScaleState(1))
    assert [(t, n) for t, n, _ in changes(ticks)] == [(50.0, 0)]


def test_load_at_zero_serving_scales_up_at_once() -> None:
    policy = OngoingPolicy(min_replicas=0, max_replicas=5, target_ongoing_requests=10)
    window = LoadWindow(span=30)
    window.add(load(7.0, queued=1))
    decision = decide(policy, ScaleState(0), window, 7.0, 0)
    assert decision.target == 1 and decision.changed


def test_a_request_waiting_at_zero_gets_a_replica_at_once() -> None:
    ray = OngoingPolicy(min_replicas=0, max_replicas=5)
    decision = request_waiting_at_zero(ray, ScaleState(0))
    assert (decision.target, decision.reason) == (1, "request waiting at zero -> 1 replica")
    assert decision.next_state == ScaleState(1)
    boosted = OngoingPolicy(min_replicas=0, max_replicas=5, upscaling_factor=2.5)
    assert request_waiting_at_zero(boosted, ScaleState(0)).target == 3  # Ray: ceil(factor)
    sky = QpsPolicy(min_replicas=0, max_replicas=5, target_qps_per_replica=1)
    assert request_waiting_at_zero(sky, ScaleState(0)).target == 1
    already = request_waiting_at_zero(sky, ScaleState(2))
    assert (already.target, already.changed) == (2, False)
    nothing = request_waiting_at_zero(FixedPolicy(0), ScaleState(0))
    assert (nothing.target, nothing.reason) == (0, "request waiting, but max_replicas is 0")


def test_zero_and_back() -> None:
    policy = OngoingPolicy(min_replicas=0, max_replicas=5, downscale_delay_s=60)

    def traffic(t: float) -> LoadSample:
        return load(t, ongoing=1 if 300 <= t < 310 else 0)

    ticks = simulate(policy, traffic, until=500, state=ScaleState(1))
    # Back to zero 60 s after the last report of load left the 30 s look-back (at 339).
    assert [(t, n) for t, n, _ in changes(ticks)] == [(60.0, 0), (300.0, 1), (399.0, 0)]


# ------------------------------------------------------------------ burst mode


def test_burst_skips_the_upscale_delay() -> None:
    policy = OngoingPolicy(min_replicas=1, max_replicas=10, target_ongoing_requests=1, burst=True)
    ticks = simulate(policy, lambda t: load(t, ongoing=5.8), until=6, state=ScaleState(1))
    assert changes(ticks) == [(0.0, 6, "burst: ongoing 5.8 over 3 s / target 1 -> 6 replicas")]
    assert ticks[-1].decision.burst


def test_burst_in_qps_uses_a_tenth_of_the_window_and_respects_max() -> None:
    policy = QpsPolicy(min_replicas=1, max_replicas=8, target_qps_per_replica=2.5, burst=True)
    ticks = simulate(policy, lambda t: load(t, started=30), until=10)
    # The 6 s rate fills up: 30/6 = 5 is exactly twice one replica (no burst), 60/6
    # is more (4 replicas), then 150/6 is more than twice those four.
    assert changes(ticks) == [
        (1.0, 4, "burst: qps 10.0 over 6 s / target 2.5 -> 4 replicas"),
        (4.0, 8, "burst: qps 25.0 over 6 s / target 2.5 -> 8 replicas (max_replicas 8)"),
    ]


def test_no_scale_down_while_bursting() -> None:
    policy = OngoingPolicy(
        min_replicas=1,
        max_replicas=10,
        target_ongoing_requests=2,
        downscale_delay_s=10,
        burst=True,
    )
    ticks = simulate(policy, lambda t: load(t, ongoing=10 if t == 0 else 0), until=60)
    assert changes(ticks)[0][:2] == (0.0, 5)
    held = [k for k in ticks if 0 < k.t < 30]
    assert all("burst mode forbids scaling down" in k.decision.reason for k in held)
    # The downscale delay only starts when burst mode ends, one window after the burst.
    assert [(t, n) for t, n, _ in changes(ticks)[1:]] == [(40.0, 1)]


def test_load_below_twice_capacity_is_no_burst() -> None:
    bursty = replace(RAY, burst=True)
    ticks = simulate(bursty, lambda t: load(t, ongoing=4), until=10)  # exactly 2x of 1 x 2
    assert changes(ticks) == [] and not any(k.decision.burst for k in ticks)


def test_no_burst_unless_asked_for() -> None:
    # Ray's own semantics: a rush waits for the upscale delay like any other load.
    policy = OngoingPolicy(min_replicas=1, max_replicas=10, target_ongoing_requests=1)
    ticks = simulate(policy, lambda t: load(t, ongoing=5.8), until=40, state=ScaleState(1))
    assert [(t, n) for t, n, _ in changes(ticks)] == [(30.0, 6)]
    assert not any(k.decision.burst for k in ticks)


# ----------------------------------------------------------- hysteresis, bounds


def test_load_swinging_around_a_boundary_does_not_flap() -> None:
    policy = OngoingPolicy(
        min_replicas=1, max_replicas=10, target_ongoing_requests=1, look_back_period_s=10
    )

    def swing(t: float) -> LoadSample:
        return load(t, ongoing=2.6 if int(t // 10) % 2 else 1.4)  # around 2 replicas' worth

    ticks = simulate(policy, swing, until=3600, state=ScaleState(2))
    assert changes(ticks) == []


def test_bounds_change_applies_at_once() -> None:
    window = LoadWindow(span=30)
    window.add(load(1.0, ongoing=100))
    decision = decide(RAY, ScaleState(14), window, 1.0, 14)
    assert (decision.target, decision.reason) == (10, "max_replicas is 10 -> 10 replicas")
    raised = OngoingPolicy(min_replicas=3, max_replicas=10)
    assert decide(raised, ScaleState(1), window, 1.0, 1).target == 3


def test_without_reports_the_target_holds() -> None:
    decision = decide(RAY, ScaleState(3), LoadWindow(span=30), 100.0, 3)
    assert (decision.target, decision.changed) == (3, False)
    assert decision.reason == "no load reports in the last 30 s; holding 3 replicas"


def test_fixed_policy_is_fixed() -> None:
    decision = decide(FixedPolicy(2), ScaleState(5), LoadWindow(span=1), 0.0, 5)
    assert (decision.target, decision.reason) == (2, "fixed size -> 2 replicas")


def test_decision_reports_its_measurements() -> None:
    window = LoadWindow(span=60)
    for t in range(60):
        window.add(load(float(t), started=3, ongoing=2))
    decision = decide(SKY, ScaleState(2), window, 59.0, 2)
    assert decision.qps == 3.0 and decision.ongoing == 2.0
    assert decision.reason == "steady: qps 3.0 over 60 s / target 2.5 -> 2 replicas"


# ------------------------------------------------------------------- properties

DELAYS = st.sampled_from([0.0, 1.0, 5.0, 20.0])


@st.composite
def policies(draw: st.DrawFn) -> QpsPolicy | OngoingPolicy:
    low = draw(st.integers(0, 3))
    high = low + draw(st.integers(0, 7))
    if draw(st.booleans()):
        return QpsPolicy(
            min_replicas=low,
            max_replicas=high,
            target_qps_per_replica=draw(st.sampled_from([0.5, 1.0, 2.5, 7.0])),
            upscale_delay_seconds=draw(DELAYS),
            downscale_delay_seconds=draw(DELAYS),
        )
    factor = st.none() | st.sampled_from([0.2, 0.5, 1.0])
    return OngoingPolicy(
        min_replicas=low,
        max_replicas=high,
        target_ongoing_requests=draw(st.sampled_from([0.5, 1.0, 2.0, 5.0])),
        look_back_period_s=draw(st.sampled_from([1.0, 5.0, 30.0])),
        upscale_delay_s=draw(DELAYS),
        downscale_delay_s=draw(DELAYS),
        downscale_to_zero_delay_s=draw(st.none() | DELAYS),
        upscaling_factor=draw(factor),
        downscaling_factor=draw(factor),
    )


LOADS = st.lists(st.integers(0, 40), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, database=None)
@given(policies(), LOADS, st.lists(st.integers(0, 12), min_size=1, max_size=60), st.integers(0, 12))
def test_target_always_within_bounds(
    policy: QpsPolicy | OngoingPolicy, loads: list[int], serving: list[int], start: int
) -> None:
    state = ScaleState(start)  # possibly outside the bounds (a policy just changed)
    window = LoadWindow(span=policy.window_s)
    for i, amount in enumerate(loads * 3):
        t = i * 2.0
        window.add(LoadSample(t, (ReplicaLoad(1, started=amount, in_flight=amount),)))
        decision = decide(policy, state, window, t, serving[i % len(serving)])
        assert policy.min_replicas <= decision.target <= policy.max_replicas
        assert "\n" not in decision.reason
        state = decision.next_state
        waiting = request_waiting_at_zero(policy, state)
        assert policy.min_replicas <= waiting.target <= policy.max_replicas


@settings(max_examples=40, deadline=None, database=None)
@given(policies(), st.integers(0, 40))
def test_constant_load_converges_then_never_changes(
    policy: QpsPolicy | OngoingPolicy, amount: int
) -> None:
    ticks = simulate(policy, lambda t: load(t, started=amount, ongoing=amount / 4), until=1500)
    settled = ticks[1000].decision.target
    assert targets(ticks[1000:]) == [settled] * len(ticks[1000:])
    per = (
        policy.target_qps_per_replica
        if isinstance(policy, QpsPolicy)
        else policy.target_ongoing_requests
    )
    metric = amount if isinstance(policy, QpsPolicy) else amount / 4
    assert settled == max(policy.min_replicas, min(policy.max_replicas, math.ceil(metric / per)))


@settings(max_examples=60, deadline=None, database=None)
@given(policies(), LOADS)
def test_scaling_down_always_waits_its_delay_since_the_last_change(
    policy: QpsPolicy | OngoingPolicy, loads: list[int]
) -> None:
    """The flapping bound: a step down comes at least a downscale delay after the
    previous change (up or down), whatever the load does."""
    ticks = simulate(
        policy,
        lambda t: load(t, started=loads[int(t) % len(loads)], ongoing=loads[int(t) % len(loads)]),
        until=300,
    )
    last_change = 0.0
    for tick in ticks:
        decision = tick.decision
        if decision.target < decision.previous:
            if isinstance(policy, QpsPolicy):
                delay = policy.downscale_delay_seconds
            else:
                delay = min(policy.downscale_delay_s, policy.to_zero_delay_s)
            assert tick.t - last_change >= delay
        if decision.changed:
            last_change = tick.t


# ---------------------------------------------------------------------- victims


def test_victims_are_not_ready_first_then_newest() -> None:
    fleet = [
        Candidate(1, ready=True, launched_at=10.0),
        Candidate(2, ready=True, launched_at=30.0),
        Candidate(3, ready=False, launched_at=5.0),
        Candidate(4, ready=True, launched_at=20.0),
        Candidate(5, ready=False, launched_at=40.0),
    ]
    assert choose_victims(fleet, 3) == [5, 3, 2]
    assert choose_victims(fleet, 0) == []
    assert choose_victims(fleet, 9) == [5, 3, 2, 4, 1]
    tie = [Candidate(7, ready=True, launched_at=1.0), Candidate(8, ready=True, launched_at=1.0)]
    assert choose_victims(tie, 1) == [8]


@given(
    st.lists(
        st.builds(Candidate, st.integers(1, 99), st.booleans(), st.floats(0, 100)),
        max_size=12,
        unique_by=lambda c: c.replica_id,
    ),
    st.integers(0, 14),
)
def test_no_ready_replica_goes_before_a_not_ready_one(fleet: list[Candidate], count: int) -> None:
    chosen = choose_victims(fleet, count)
    assert len(chosen) == min(count, len(fleet)) and len(set(chosen)) == len(chosen)
    ready = {c.replica_id for c in fleet if c.ready}
    if any(r in ready for r in chosen):
        assert all(c.replica_id in chosen for c in fleet if not c.ready)


# ------------------------------------------------------------------ from the spec


def section(service: dict[str, object]) -> ServiceSection:
    return parse_service({"run": "x", "service": service}, base_dir=Path("/x")).service


def test_policy_for_reads_the_service_section() -> None:
    assert policy_for(section({"replicas": 3})) == FixedPolicy(3)
    assert policy_for(section({"replica_policy": {"min_replicas": 2}})) == FixedPolicy(2)
    sky = {"min_replicas": 0, "max_replicas": 4, "target_qps_per_replica": 2}
    assert policy_for(section({"replica_policy": sky})) == QpsPolicy(0, 4, 2.0)
    ray = {"max_replicas": 6, "initial_replicas": 2, "downscale_to_zero_delay_s": 5}
    assert policy_for(section({"autoscaling_config": ray})) == OngoingPolicy(
        min_replicas=1, max_replicas=6, initial_replicas=2, downscale_to_zero_delay_s=5.0
    )


def test_the_worked_example_in_the_docs() -> None:
    policy = OngoingPolicy(
        min_replicas=0,
        max_replicas=10,
        target_ongoing_requests=2,
        downscale_delay_s=300,
        downscale_to_zero_delay_s=60,
        burst=True,
    )
    first_request = request_waiting_at_zero(policy, initial_state(policy))
    assert first_request.reason == "request waiting at zero -> 1 replica"

    def traffic(t: float) -> LoadSample:
        amount = 3.5 if t < 100 else 20.0 if t < 160 else 1.2 if t < 700 else 0.0
        return load(t, ongoing=amount)

    ticks = simulate(policy, traffic, start=1, until=1000, state=first_request.next_state)
    assert changes(ticks) == [
        (31.0, 2, "ongoing 3.5 over 30 s / target 2 -> 2 replicas"),
        (100.0, 5, "burst: ongoing 9.0 over 3 s / target 2 -> 5 replicas"),
        (141.0, 10, "ongoing 20.0 over 30 s / target 2 -> 10 replicas"),
        (463.0, 1, "ongoing 1.2 over 30 s / target 2 -> 1 replica"),
        (789.0, 0, "ongoing 0.0 over 30 s / target 2 -> 0 replicas"),
    ]


def test_durations_in_reasons_read_like_a_person_wrote_them() -> None:
    """Ticks at uneven moments (0.7341 s apart): every duration in a reason is at
    most one decimal under 10 s and whole seconds above, never ``29.2341``. Ray's
    policy says how long it has waited; SkyServe's counts decisions and names its
    delay."""
    # Ray: 5 ongoing on one replica wants 3 (target 2): held for its 30 s upscale delay.
    ticks = simulate(RAY, lambda t: load(t, ongoing=5), until=40, step=0.7341, start=0.1)
    held = [k.decision.reason for k in ticks if "upscale delay" in k.decision.reason]
    assert held, [k.decision.reason for k in ticks]
    for reason in held:
        durations = re.findall(r" ([0-9.]+) of ([0-9.]+) s upscale delay", reason)
        assert durations, reason
        for number in durations[0]:
            decimals = number.partition(".")[2]
            assert len(decimals) <= (1 if float(number) < 10 else 0), reason
    assert any(" of 30 s upscale delay" in r for r in held)
    assert any(re.search(r" \d\.\d of", r) for r in held)
    # SkyServe: 3 requests a tick, about 4.1 qps: more than one replica (2.5).
    ticks = simulate(SKY, lambda t: load(t, started=3), until=200, step=0.7341, start=0.1)
    reasons = [k.decision.reason for k in ticks]
    assert any("(300 s upscale delay)" in r for r in reasons), reasons
    for reason in reasons:
        for number in re.findall(r"([0-9]+\.[0-9]+) s\b", reason):
            assert float(number) < 10 and len(number.partition(".")[2]) <= 1, reason
