"""The stable version heals during an update that keeps it serving: plan_canary's and
blue-green's ``launch_old``, with examples and, over any fleet, the invariant
"live old replicas + old launches == the target" while the canary runs."""

from __future__ import annotations

from typing import Literal

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.update_plans import plan_canary, plan_update

from steadyserve.core.planner import Plan, ReplicaView
from steadyserve.core.states import ReplicaStatus

R = ReplicaStatus
NEW = 3
Mode = Literal["rolling", "blue_green"]


def views(spec: list[tuple[int, int, ReplicaStatus]]) -> list[ReplicaView]:
    return [ReplicaView(i, v, s) for i, v, s in spec]


def test_a_failed_stable_replica_is_replaced_while_the_canary_runs() -> None:
    fleet = views([(1, 1, R.FAILED), (2, 1, R.READY), (3, 1, R.READY), (4, 2, R.READY)])
    step = plan_canary(3, 2, fleet, new_count=1, complete=False)
    assert (step.launch, step.launch_old, step.drain) == (0, 1, ())
    # The replacement is live (not ready yet): nothing more is launched.
    fleet += views([(5, 1, R.STARTING)])
    step = plan_canary(3, 2, fleet, new_count=1, complete=False)
    assert step.launch_old == 0 and step.routable == {2, 3, 4}


def test_no_stable_launch_once_complete_aborted_or_broken() -> None:
    fleet = views([(1, 1, R.FAILED_PROBING), (2, 1, R.READY), (3, 2, R.READY)])
    assert plan_canary(2, 2, fleet, new_count=1, complete=False).launch_old == 1
    assert plan_canary(2, 2, fleet, new_count=1, complete=True).launch_old == 0
    assert plan_canary(2, 2, fleet, new_count=1, complete=False, aborted=True).launch_old == 0
    assert plan_canary(2, 2, fleet, new_count=1, complete=False, old_broken=True).launch_old == 0


def test_blue_green_heals_the_old_version_before_the_switch_only() -> None:
    fleet = views([(1, 1, R.FAILED), (2, 1, R.READY), (3, 2, R.READY), (4, 2, R.READY)])

    def plan(mode: Mode = "blue_green", **options: bool) -> Plan:
        return plan_update(mode, 2, 2, fleet, max_surge=2, max_unavailable=0, **options)

    held = plan(switch_allowed=False)
    assert held.launch_old == 1 and held.routable == {2}
    assert plan(switch_allowed=False, old_broken=True).launch_old == 0
    # After the switch the old version serves nobody (warm or draining): no launch.
    assert plan(keep_old=True).launch_old == 0 and plan().launch_old == 0
    # Rolling replaces the old version with the new one: never an old launch.
    assert plan("rolling").launch_old == 0


@settings(max_examples=300, deadline=None)
@given(
    target=st.integers(0, 6),
    new_count=st.integers(0, 8),
    phase=st.sampled_from(["running", "complete", "aborted"]),
    old_broken=st.booleans(),
    spec=st.lists(st.tuples(st.integers(1, NEW), st.sampled_from(list(R))), max_size=12),
)
def test_the_stable_version_is_whole_while_the_canary_runs(
    target: int,
    new_count: int,
    phase: str,
    old_broken: bool,
    spec: list[tuple[int, ReplicaStatus]],
) -> None:
    fleet = [ReplicaView(i + 1, v, s) for i, (v, s) in enumerate(spec)]
    step = plan_canary(
        target,
        NEW,
        fleet,
        new_count=new_count,
        complete=phase == "complete",
        aborted=phase == "aborted",
        old_broken=old_broken,
    )
    old_live = sum(1 for r in fleet if r.status.is_live and r.version != NEW)
    drained = {rid for rid, _ in step.drain}
    assert step.launch_old >= 0
    if phase != "running" or old_broken:
        assert step.launch_old == 0
    else:
        # Nothing of the old version drains before the end, and it is made whole.
        assert not any(r.id in drained for r in fleet if r.version != NEW)
        assert old_live + step.launch_old == max(target, old_live)


@settings(max_examples=100, deadline=None)
@given(
    target=st.integers(1, 5),
    crashes=st.lists(st.integers(0, 20), max_size=6),
    ticks=st.integers(1, 25),
)
def test_a_simulated_canary_keeps_the_stable_version_at_its_target(
    target: int, crashes: list[int], ticks: int
) -> None:
    """Walk a canary held at one weight: each tick the plan is carried out (launches
    start, starting replicas get READY) and some stable replicas crash; after every
    plan the stable version's live replicas plus its launches are its target."""
    fleet: dict[int, ReplicaView] = {i: ReplicaView(i, 1, R.READY) for i in range(1, target + 1)}
    next_id = target + 1
    for tick in range(ticks):
        for n in (c for c in crashes if c == tick):
            old = sorted(r.id for r in fleet.values() if r.version == 1 and r.status.is_live)
            if old:
                victim = old[n % len(old)]
                fleet[victim] = ReplicaView(victim, 1, R.FAILED)
        step = plan_canary(target, 2, list(fleet.values()), new_count=1, complete=False)
        old_live = sum(1 for r in fleet.values() if r.version == 1 and r.status.is_live)
        assert old_live + step.launch_old == target
        for rid in fleet:  # what started last tick is READY now
            if fleet[rid].status is R.STARTING:
                fleet[rid] = ReplicaView(rid, fleet[rid].version, R.READY)
        for version, count in ((2, step.launch), (1, step.launch_old)):
            for _ in range(count):
                fleet[next_id] = ReplicaView(next_id, version, R.STARTING)
                next_id += 1
    live_old = [r for r in fleet.values() if r.version == 1 and r.status.is_live]
    assert len(live_old) == target
