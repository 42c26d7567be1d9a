"""The canary's pure parts: the step machine (simulated time), the weighted choice
and the analysis verdicts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.core.canary.analysis import Analysis, Counts, Thresholds, judge
from steadyserve.core.canary.steps import (
    MOVES,
    CanaryState,
    Input,
    Phase,
    Refused,
    Step,
    move,
    new_replicas,
    refusal,
    start,
)
from steadyserve.core.canary.weighted import SmoothWeighted

STEPS = [Step(weight=10), Step(pause_s=60), Step(weight=50), Step(), Step(weight=100)]
BOUNDS = (0.01, 0.05, 0.1, 0.5, 1.0)


def test_walks_the_issue_example_with_simulated_time() -> None:
    s = move(start(0.0), STEPS, Input.TICK, 0.0, scaled=False)
    assert (s.step, s.weight, s.phase) == (0, 10, Phase.RUNNING)
    s = move(s, STEPS, Input.TICK, 1.0, scaled=False)
    assert s.step == 0, "a weight step waits for its replicas"
    s = move(s, STEPS, Input.TICK, 2.0, scaled=True)
    assert (s.step, s.weight) == (1, 10) and s.step_started == 2.0
    s = move(s, STEPS, Input.TICK, 61.9)
    assert s.step == 1, "the pause lasts 60 s from its start"
    s = move(s, STEPS, Input.TICK, 62.0, scaled=False)
    assert (s.step, s.weight) == (2, 50)
    s = move(s, STEPS, Input.TICK, 63.0, scaled=True)
    assert (s.step, s.phase) == (3, Phase.WAITING)
    for t in range(64, 1000, 50):
        assert move(s, STEPS, Input.TICK, float(t)) == s, "pause: {} waits for promote"
    s = move(s, STEPS, Input.PROMOTE, 1000.0, scaled=False)
    assert (s.step, s.weight, s.phase) == (4, 100, Phase.RUNNING)
    s = move(s, STEPS, Input.TICK, 1001.0, scaled=True)
    assert (s.weight, s.phase) == (100, Phase.COMPLETE)


def test_abort_sets_weight_zero_from_any_live_phase() -> None:
    for phase in (Phase.RUNNING, Phase.WAITING, Phase.PAUSED):
        s = CanaryState(step=2, weight=50, phase=phase)
        for event in (Input.ABORT, Input.FAILED_ANALYSIS):
            out = move(s, STEPS, event, 5.0, reason="why")
            assert (out.weight, out.phase, out.reason) == (0, Phase.ABORTED, "why")


def test_pause_holds_and_resume_restarts_a_timed_pause() -> None:
    s = CanaryState(step=1, weight=10, phase=Phase.RUNNING, step_started=0.0)
    held = move(s, STEPS, Input.PAUSE, 10.0)
    assert held.phase is Phase.PAUSED
    assert move(held, STEPS, Input.TICK, 500.0) == held
    resumed = move(held, STEPS, Input.RESUME, 500.0)
    assert (resumed.step, resumed.phase, resumed.step_started) == (1, Phase.RUNNING, 500.0)
    assert move(resumed, STEPS, Input.TICK, 559.0).step == 1
    assert move(resumed, STEPS, Input.TICK, 560.0, scaled=False).weight == 50


def test_promote_full_skips_every_step() -> None:
    out = move(CanaryState(step=1, weight=10), STEPS, Input.PROMOTE_FULL, 1.0)
    assert (out.weight, out.phase, out.step) == (100, Phase.COMPLETE, len(STEPS))


def test_refusals_are_one_line_and_name_the_state() -> None:
    with pytest.raises(Refused, match="not paused"):
        move(CanaryState(), STEPS, Input.RESUME, 0.0)
    done = CanaryState(step=5, weight=100, phase=Phase.COMPLETE)
    for event in Input:
        if event is not Input.TICK:
            why = refusal(done, event)
            assert why is not None and "complete" in why and "\n" not in why


def test_new_replicas_follow_the_weight_and_at_least_one() -> None:
    assert new_replicas(4, 10) == 1
    assert new_replicas(4, 50) == 2
    assert new_replicas(4, 51) == 3
    assert new_replicas(4, 100) == 4
    assert new_replicas(4, 0) == 1
    assert new_replicas(0, 50) == 0


steps_strategy = st.lists(
    st.one_of(
        st.builds(Step, weight=st.integers(0, 100)),
        st.builds(Step, pause_s=st.one_of(st.none(), st.floats(0, 100))),
    ),
    min_size=0,
    max_size=6,
).map(lambda steps: [*steps, Step(weight=100)])


@settings(max_examples=300, deadline=None)
@given(
    steps=steps_strategy,
    events=st.lists(
        st.tuples(st.sampled_from(list(Input)), st.floats(0, 30), st.booleans()), max_size=40
    ),
)
def test_every_walk_stays_in_the_table(
    steps: list[Step], events: list[tuple[Input, float, bool]]
) -> None:
    """Whatever the inputs: time only moves forward, the step index never goes back,
    a refused input changes nothing, final phases are final, and the weight is
    always one the steps name (or 0 before the first / after an abort, 100 at the end)."""
    now = 0.0
    s = start(now)
    allowed = {0, 100} | {st_.weight for st_ in steps if st_.weight is not None}
    for event, dt, scaled in events:
        now += dt
        before = s
        try:
            s = move(s, steps, event, now, scaled=scaled)
        except Refused:
            assert (before.phase, event) not in MOVES
            s = before
            continue
        assert (before.phase, event) in MOVES
        assert s.step >= before.step or s.phase is Phase.ABORTED
        assert s.weight in allowed
        if before.phase.is_final:
            assert s == before
        if s.phase is Phase.COMPLETE:
            assert s.weight == 100
        if s.phase is Phase.ABORTED:
            assert s.weight == 0
    assert CanaryState.from_json(s.to_json()) == s


@settings(max_examples=200, deadline=None)
@given(steps=steps_strategy)
def test_promote_and_time_always_finish(steps: list[Step]) -> None:
    s = start(0.0)
    now = 0.0
    for _ in range(3 * len(steps) + 3):
        now += 1000.0
        event = Input.PROMOTE if s.phase is Phase.WAITING else Input.TICK
        s = move(s, steps, event, now, scaled=True)
        if s.phase is Phase.COMPLETE:
            break
    assert s.phase is Phase.COMPLETE and s.weight == 100


# ----------------------------------------------------------------- weighted choice


@settings(max_examples=200, deadline=None)
@given(
    weights=st.dictionaries(st.integers(1, 9), st.integers(0, 100), min_size=1, max_size=4),
    n=st.integers(1, 2000),
    seed=st.integers(0, 2**32),
)
def test_weighted_share_is_exact_at_every_round(weights: dict[int, int], n: int, seed: int) -> None:
    chooser = SmoothWeighted(weights, random.Random(seed))
    picks = [chooser.pick() for _ in range(n)]
    total = sum(weights.values())
    if total == 0:
        assert picks == [None] * n
        return
    length = chooser.round_length
    for key, weight in weights.items():
        whole = n - n % length
        # Exact after every whole round, and off by less than a round in between.
        assert picks[:whole].count(key) == whole * weight // total
        assert abs(picks.count(key) - n * weight / total) < length


def test_weighted_interleaves_and_skips_ineligible_without_charge() -> None:
    chooser = SmoothWeighted({1: 90, 2: 10}, random.Random(7))
    picks = [chooser.pick() for _ in range(1000)]
    assert picks.count(2) == 100
    runs = "".join(str(p) for p in picks).split("1")
    assert max(len(r) for r in runs) <= 2, "the canary's requests are spread, not bunched"
    only_old = SmoothWeighted({1: 80, 2: 20})
    assert [only_old.pick(lambda v: v == 1) for _ in range(10)] == [1] * 10
    assert SmoothWeighted({1: 0, 2: 100}).pick(lambda v: v == 1) is None


def test_a_client_in_step_with_the_period_still_sees_the_weight() -> None:
    """Strict smooth round robin is periodic (80/20: 1,1,2,1,1): a client whose
    requests are every 5th would see 0% or 100% canary. The random draw among
    versions in credit gives that client the weight too."""
    chooser = SmoothWeighted({1: 80, 2: 20}, random.Random(3))
    picks = [chooser.pick() for _ in range(20000)]
    for offset in range(5):
        mine = picks[offset::5]
        assert abs(mine.count(2) / len(mine) - 0.20) < 0.03, offset


# ----------------------------------------------------------------- analysis


def counts(requests: float, failures: float, slow: float = 0.0) -> Counts:
    fast = requests - slow
    return Counts(requests, failures, (fast, 0.0, 0.0, slow, 0.0, 0.0))


def test_judge_absolute_and_relative_limits() -> None:
    limits = Thresholds(max_error_rate=0.05, min_requests=10)
    assert judge(counts(100, 30), counts(400, 0), limits, BOUNDS).failed
    assert not judge(counts(100, 1), counts(400, 0), limits, BOUNDS).failed
    relative = Thresholds(max_error_rate_increase=0.02, min_requests=10)
    # Both versions fail 10%: the canary is no worse than the baseline.
    assert not judge(counts(100, 10), counts(400, 40), relative, BOUNDS).failed
    assert judge(counts(100, 20), counts(400, 40), relative, BOUNDS).failed
    latency = Thresholds(max_p99_ratio=3, min_requests=10)
    verdict = judge(counts(100, 0, slow=100), counts(400, 0), latency, BOUNDS)
    assert verdict.failed and "max_p99_ratio" in verdict.reason
    assert judge(counts(5, 5), counts(5, 0), limits, BOUNDS).outcome == "inconclusive"


def test_analysis_waits_a_window_and_counts_failures_in_a_row() -> None:
    a = Analysis(
        Thresholds(max_error_rate=0.1, min_requests=10, interval_s=5, failure_limit=2), BOUNDS
    )
    total_c, total_s = Counts(), Counts()
    verdicts = []
    for t in range(0, 31):
        # The canary fails 30% of 20 requests a second; the stable version none.
        total_c = Counts(total_c.requests + 20, total_c.failures + 6, (total_c.requests + 20,))
        total_s = Counts(total_s.requests + 80, 0.0, (total_s.requests + 80,))
        a.observe(float(t), {2: total_c, 1: total_s})
        v = a.check(float(t), canary=2, stable=1)
        if v is not None:
            verdicts.append((t, v.outcome))
    assert verdicts[0] == (5, "warning")
    assert verdicts[1] == (10, "failed")
    assert all(t % 5 == 0 for t, _ in verdicts)
