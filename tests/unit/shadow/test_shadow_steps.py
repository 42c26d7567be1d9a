"""The canary's step machine with a shadow step (core/canary/steps.py), on simulated time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.core.canary.steps import CanaryState, Input, Phase, Step, move, start

STEPS = [Step(shadow=50), Step(pause_s=60), Step(weight=10), Step(weight=100)]


def tick(s: CanaryState, now: float, shadow: str | None, scaled: bool = True) -> CanaryState:
    return move(s, STEPS, Input.TICK, now, scaled=scaled, shadow=shadow)


def test_mirrors_then_walks_on_once_passed_and_the_pause_ends() -> None:
    s = tick(start(0.0), 0.0, None, scaled=False)
    assert (s.step, s.weight, s.mirror) == (0, 0, 50)
    s = tick(s, 5.0, "passed", scaled=False)
    assert s.step == 0, "the shadow step waits for the replicas its share needs"
    s = tick(s, 7.0, None)
    assert (s.step, s.weight, s.mirror) == (1, 0, 50), "mirroring holds through the pause"
    s = tick(s, 66.9, "passed")
    assert s.step == 1
    s = tick(s, 67.0, "passed")
    assert (s.step, s.weight, s.mirror) == (2, 10, 0), "the weight step ends the mirroring"


def test_inconclusive_at_the_end_of_the_pause_aborts() -> None:
    s = tick(tick(start(0.0), 0.0, None), 1.0, None)
    assert s.step == 1
    s = tick(s, 61.0, "inconclusive")
    assert s.phase is Phase.ABORTED and (s.weight, s.mirror) == (0, 0)
    assert "inconclusive at the end of the 60s pause" in s.reason


def test_a_failed_verdict_aborts_at_once() -> None:
    s = tick(start(0.0), 0.0, None)
    s = move(s, STEPS, Input.FAILED_ANALYSIS, 1.0, reason="shadow failed")
    assert s.phase is Phase.ABORTED and s.mirror == 0


def test_without_a_pause_the_step_waits_for_its_verdict() -> None:
    steps = [Step(shadow=100), Step(weight=100)]
    s = move(start(0.0), steps, Input.TICK, 0.0, shadow=None)
    for t in range(1, 1000, 97):
        s = move(s, steps, Input.TICK, float(t), shadow="inconclusive")
        assert (s.step, s.weight, s.mirror, s.phase) == (1, 0, 100, Phase.RUNNING)
    s = move(s, steps, Input.TICK, 2000.0, shadow="passed")
    assert (s.weight, s.mirror) == (100, 0)
    s = move(s, steps, Input.TICK, 2001.0)
    assert s.phase is Phase.COMPLETE


def test_promote_walks_past_the_shadow_step() -> None:
    s = tick(start(0.0), 0.0, None)
    s = move(s, STEPS, Input.PROMOTE, 1.0, shadow="inconclusive")
    assert (s.step, s.mirror) == (1, 50)


def test_a_state_saved_before_shadow_steps_loads() -> None:
    old = {"step": 1, "weight": 10, "phase": "RUNNING", "step_started": 3.0, "reason": ""}
    assert CanaryState.from_json(old).mirror == 0
    s = CanaryState(step=0, mirror=50)
    assert CanaryState.from_json(s.to_json()) == s


verdicts = st.sampled_from([None, "inconclusive", "passed", "failed"])


@settings(max_examples=300)
@given(st.lists(st.tuples(st.floats(0, 30), verdicts, st.booleans()), max_size=40))
def test_no_client_weight_before_a_passed_verdict(
    ticks: list[tuple[float, str | None, bool]],
) -> None:
    """Whatever the timing, clients get a weight only on a tick whose verdict
    passed, and never while mirroring (an abort leaves weight and mirror at 0)."""
    s = start(0.0)
    now = 0.0
    for dt, verdict, scaled in ticks:
        now += dt
        before = s.weight
        s = move(s, STEPS, Input.TICK, now, scaled=scaled, shadow=verdict)
        assert not (s.weight and s.mirror)
        if s.weight > 0 and before == 0:
            assert verdict == "passed"
        if s.phase is Phase.ABORTED:
            assert (s.weight, s.mirror) == (0, 0)
            break
