"""The deterministic simulator (steadyserve/sim/): schedules of the real controller on
simulated time, invariants after every step; the same seed gives the same trace;
every mutant of sim/mutants.py is caught by the invariant it targets; and the seeds
that found defects in the controller replay clean (each failed before its fix)."""

from __future__ import annotations

import pytest

from steadyserve.sim.cli import catch, main
from steadyserve.sim.mutants import MUTANTS
from steadyserve.sim.runner import run
from steadyserve.sim.schedule import MIN_STEPS, UPDATES, draw

SUITE_SCHEDULES = 200
"""Seeds 1..200: about 15 s of one core (bench/RESULTS.md has the long runs)."""


def test_the_same_seed_gives_the_same_trace_bytes() -> None:
    for seed in (3, 77, 126):  # a controller kill, an in-place join, a rolling update
        first, second = run(draw(seed)), run(draw(seed))
        assert first.trace_bytes() == second.trace_bytes()
        assert len(first.trace_bytes()) > 1000


def test_every_schedule_has_an_update_a_fault_and_enough_steps() -> None:
    faults = {
        "crash",
        "hang",
        "probe_fail",
        "slow_start",
        "never_start",
        "controller_kill",
        "lb_restart",
    }
    for seed in range(1, 200):
        schedule = draw(seed)
        kinds = [kind for _, kind, _ in schedule.events]
        assert "update" in kinds and faults & set(kinds), seed
        assert schedule.steps >= MIN_STEPS
        assert {a["mode"] for _, k, a in schedule.events if k == "update"} <= set(UPDATES)


def test_schedules_of_the_suite_keep_every_invariant(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--schedules", str(SUITE_SCHEDULES), "--seed", "1", "--no-shrink"])
    out = capsys.readouterr().out
    assert out.splitlines()[-1].endswith("violations=0"), out
    assert code == 0


# Seeds that found a defect of the controller; each violated an invariant before its fix.
FIXED = {
    42: "a canary promoted to weight 100 while its replica still started: every request refused",
    77: "an in-place version judged broken when its first new replica failed: never replaced",
    769: "an in-place update succeeded while its only replica still started; that replica"
    " then refused the config, the version was judged broken and the service stayed FAILED",
}


@pytest.mark.parametrize("seed", sorted(FIXED))
def test_seeds_that_found_defects_replay_clean(seed: int) -> None:
    result = run(draw(seed))
    assert result.violations == [], FIXED[seed]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_is_caught_by_the_invariant_it_targets(mutant: object) -> None:
    took, _ = catch(mutant, seed=1)  # type: ignore[arg-type]
    assert took is not None, f"{mutant} not caught"


# Seeds that found defects not fixed yet (docs/testing.md, "Open findings"): each must
# keep failing until its fix, which then moves it to FIXED.
OPEN = {
    385: "an in-place change and `steady abort` racing: the in-place version becomes the"
    " target over replicas of two other versions and never converges",
}


@pytest.mark.parametrize("seed", sorted(OPEN))
@pytest.mark.xfail(strict=True, reason="open finding of the simulator")
def test_seeds_of_open_findings_still_fail(seed: int) -> None:
    result = run(draw(seed))
    assert result.violations == [], OPEN[seed]
