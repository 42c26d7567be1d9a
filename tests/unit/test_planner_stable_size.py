"""The stable version of a blue-green or canary update is never grown to the new
version's target: it heals back to the size it had when the update started (or to
the target, if autoscaling made that smaller), and the new version alone is
launched to the new target (planner.stable_size)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.update_plans import plan_canary, plan_update

from steadyserve.core.canary.steps import new_replicas
from steadyserve.core.planner import Plan, ReplicaView, stable_size
from steadyserve.core.states import ReplicaStatus, UpdateMode

R = ReplicaStatus
NEW = 2
MODES = ("blue_green", "canary")


def plan(
    mode: str, target: int, fleet: list[ReplicaView], stable: int | None, weight: int = 50
) -> Plan:
    """The step of an update that still keeps the old version serving."""
    if mode == "canary":
        return plan_canary(
            target,
            NEW,
            fleet,
            new_count=new_replicas(target, weight),
            complete=False,
            stable_target=stable,
        )
    return plan_update(
        UpdateMode.BLUE_GREEN,
        target,
        NEW,
        fleet,
        max_surge=1,
        max_unavailable=0,
        switch_allowed=False,
        stable_target=stable,
    )


def test_every_size_keeps_the_old_version_and_launches_the_new_to_its_target() -> None:
    """From ``old`` READY replicas to any new target, in both modes: no old launch,
    no old drain before the switch, and the new version to its own target."""
    for mode, old, target in itertools.product(MODES, range(7), range(9)):
        fleet = [ReplicaView(i, 1, R.READY) for i in range(1, old + 1)]
        step = plan(mode, target, fleet, stable=old)
        assert step.launch_old == 0, (mode, old, target)
        assert not step.drain, (mode, old, target)
        wanted = target if mode == "blue_green" else new_replicas(target, 50)
        assert step.launch == wanted, (mode, old, target)


def test_blue_green_from_2_to_5_launches_5_new_and_no_old() -> None:
    fleet = [ReplicaView(1, 1, R.READY), ReplicaView(2, 1, R.READY)]
    step = plan("blue_green", 5, fleet, stable=2)
    assert (step.launch, step.launch_old) == (5, 0)
    # A stable replica lost before the switch is replaced: back to 2, not to 5.
    lost = [ReplicaView(1, 1, R.FAILED), ReplicaView(2, 1, R.READY)]
    assert plan("blue_green", 5, lost, stable=2).launch_old == 1
    assert plan("canary", 5, lost, stable=2).launch_old == 1


def test_the_stable_size_is_the_smaller_of_its_own_and_the_target() -> None:
    assert stable_size(2, 5) == 2
    assert stable_size(5, 3) == 3  # autoscaling shrank the target: heal to that only
    assert stable_size(None, 4) == 4  # an update recorded without the size
    assert stable_size(3, -1) == 0


@settings(max_examples=400, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    stable=st.integers(0, 6),
    target=st.integers(0, 8),
    weight=st.integers(0, 100),
    spec=st.lists(st.tuples(st.sampled_from([1, NEW]), st.sampled_from(list(R))), max_size=14),
)
def test_the_old_version_never_grows_beyond_its_size(
    mode: str, stable: int, target: int, weight: int, spec: list[tuple[int, ReplicaStatus]]
) -> None:
    fleet = [ReplicaView(i + 1, v, s) for i, (v, s) in enumerate(spec)]
    step = plan(mode, target, fleet, stable, weight)
    old_live = sum(1 for r in fleet if r.status.is_live and r.version != NEW)
    assert old_live + step.launch_old <= max(old_live, stable)
    if mode == "blue_green" and old_live == 0:
        assert step.launch_old == 0  # no old version left to serve: nothing to heal
        return
    # Healed to the smaller of its size and the target, never beyond what it has.
    assert old_live + step.launch_old == max(old_live, min(stable, target))
