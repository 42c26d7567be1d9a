"""The update planner: example steps for each rule, then whole updates walked by a
simulator that carries out every plan, with the invariants checked at each step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.update_plans import plan_canary, plan_update

from steadyserve.core.planner import Plan, ReplicaView
from steadyserve.core.states import ReplicaStatus

R = ReplicaStatus
Mode = Literal["rolling", "blue_green"]
MODES: list[Mode] = ["rolling", "blue_green"]


def view(rid: int, version: int, status: ReplicaStatus = R.READY) -> ReplicaView:
    return ReplicaView(rid, version, status)


def drained(plan: Plan) -> list[int]:
    return [rid for rid, _ in plan.drain]


def summary(plan: Plan) -> tuple[int, list[int], set[int]]:
    """(launch, drained ids, routable ids), for compact expectations."""
    return plan.launch, drained(plan), set(plan.routable)


# ------------------------------------------------------------------- rolling examples


def test_rolling_surge_1_unavailable_0_walks_one_at_a_time() -> None:
    fleet = [view(1, 1), view(2, 1), view(3, 1)]
    kw = {"max_surge": 1, "max_unavailable": 0}

    plan = plan_update("rolling", 3, 2, fleet, **kw)
    assert summary(plan) == (1, [], {1, 2, 3})

    fleet.append(view(4, 2, R.STARTING))  # launched, not ready: nothing may drain yet
    plan = plan_update("rolling", 3, 2, fleet, **kw)
    assert summary(plan) == (0, [], {1, 2, 3})

    fleet[3] = view(4, 2)  # ready: 4 > 3, the surplus old one drains (highest id first)
    plan = plan_update("rolling", 3, 2, fleet, **kw)
    assert drained(plan) == [3]
    assert plan.launch == 1  # into the room the drain frees
    assert plan.routable == {1, 2, 4}
    assert not plan.done


def test_rolling_surge_0_unavailable_1_drains_before_it_launches() -> None:
    fleet = [view(1, 1), view(2, 1), view(3, 1)]
    plan = plan_update("rolling", 3, 2, fleet, max_surge=0, max_unavailable=1)
    assert drained(plan) == [3]
    assert plan.launch == 1
    assert plan.routable == {1, 2}

    fleet = [view(1, 1), view(2, 1), view(4, 2, R.STARTING)]
    plan = plan_update("rolling", 3, 2, fleet, max_surge=0, max_unavailable=1)
    assert summary(plan) == (0, [], {1, 2})


def test_rolling_drains_not_ready_old_first_and_replaces_them() -> None:
    fleet = [view(1, 1), view(2, 1, R.NOT_READY), view(3, 1, R.STARTING)]
    plan = plan_update("rolling", 3, 2, fleet, max_surge=1, max_unavailable=0)
    assert sorted(drained(plan)) == [2, 3]
    assert plan.routable == {1}
    assert plan.launch == 3  # live 1 after the drains, room up to 4, at most 3 new


def test_rolling_routes_every_ready_version() -> None:
    fleet = [view(1, 1), view(2, 1), view(3, 2), view(4, 2, R.STARTING)]
    plan = plan_update("rolling", 4, 2, fleet, max_surge=1, max_unavailable=0)
    assert plan.routable == {1, 2, 3}
    assert (plan.launch, drained(plan)) == (1, [])


def test_rolling_ready_surplus_drains_oldest_version_then_highest_id() -> None:
    fleet = [view(1, 2), view(2, 1), view(3, 1), view(4, 3), view(5, 3), view(6, 3)]
    plan = plan_update("rolling", 3, 3, fleet, max_surge=1, max_unavailable=0)
    assert drained(plan) == [3, 2, 1]
    assert plan.routable == {4, 5, 6}
    assert plan.done is False  # the old ones are still live until they stop
    after = [view(4, 3), view(5, 3), view(6, 3), view(1, 2, R.SHUTTING_DOWN)]
    assert plan_update("rolling", 3, 3, after, max_surge=1, max_unavailable=0).done


def test_rolling_partial_surplus_takes_the_oldest_version() -> None:
    fleet = [view(5, 2), view(1, 1), view(2, 1), view(7, 3)]
    plan = plan_update("rolling", 3, 3, fleet, max_surge=1, max_unavailable=0)
    assert drained(plan) == [2]
    assert plan.routable == {1, 5, 7}


def test_rolling_unavailable_budget_is_used_as_in_kubernetes() -> None:
    # 4 replicas, 25% / 25%: one old drains at once, two new start (live 3 + 2 - 1 = 4 + 1).
    fleet = [view(i, 1) for i in range(1, 5)]
    plan = plan_update("rolling", 4, 2, fleet, max_surge=1, max_unavailable=1)
    assert drained(plan) == [4]
    assert plan.launch == 2
    assert plan.routable == {1, 2, 3}


def test_rolling_never_launches_beyond_target_new() -> None:
    fleet = [view(1, 1), view(2, 2, R.STARTING), view(3, 2, R.STARTING)]
    plan = plan_update("rolling", 2, 2, fleet, max_surge=5, max_unavailable=0)
    assert plan.launch == 0


def test_rolling_surplus_new_replicas_drain_not_ready_first() -> None:
    fleet = [view(1, 2), view(2, 2, R.STARTING), view(3, 2), view(4, 2, R.NOT_READY)]
    plan = plan_update("rolling", 2, 2, fleet, max_surge=1, max_unavailable=0)
    assert sorted(drained(plan)) == [2, 4]
    assert plan.routable == {1, 3}
    assert plan.launch == 0
    assert not plan.done


def test_both_limits_zero_still_progresses() -> None:
    fleet = [view(1, 1), view(2, 1)]
    plan = plan_update("rolling", 2, 2, fleet, max_surge=0, max_unavailable=0)
    assert drained(plan) == [2]
    assert plan.launch == 1


def test_failed_and_shutting_down_replicas_are_ignored() -> None:
    fleet = [
        view(1, 1),
        view(2, 1, R.SHUTTING_DOWN),
        view(3, 2, R.FAILED_INITIAL_DELAY),
        view(4, 2, R.FAILED),
    ]
    plan = plan_update("rolling", 1, 2, fleet, max_surge=1, max_unavailable=0)
    assert summary(plan) == (1, [], {1})
    plan = plan_update("blue_green", 1, 2, fleet, max_surge=1, max_unavailable=0)
    assert summary(plan) == (1, [], {1})


@pytest.mark.parametrize("mode", MODES)
def test_target_zero_drains_everything_and_launches_nothing(mode: Mode) -> None:
    fleet = [view(1, 1), view(2, 1, R.STARTING), view(3, 2)]
    plan = plan_update(mode, 0, 2, fleet, max_surge=0, max_unavailable=0)
    assert sorted(drained(plan)) == [1, 2, 3]
    assert (plan.launch, plan.routable, plan.done) == (0, frozenset(), False)
    assert plan_update(mode, 0, 2, [], max_surge=0, max_unavailable=0).done


# ---------------------------------------------------------------- blue-green examples


def test_blue_green_starts_the_full_target_and_keeps_traffic_on_old() -> None:
    fleet = [view(1, 1), view(2, 1), view(3, 1, R.STARTING)]
    plan = plan_update("blue_green", 3, 2, fleet, max_surge=0, max_unavailable=0)
    assert summary(plan) == (3, [], {1, 2})

    fleet += [view(4, 2), view(5, 2), view(6, 2, R.STARTING)]
    plan = plan_update("blue_green", 3, 2, fleet, max_surge=0, max_unavailable=0)
    assert summary(plan) == (0, [], {1, 2})


def test_blue_green_switch_is_one_step() -> None:
    fleet = [view(1, 1), view(2, 1), view(3, 1, R.NOT_READY), view(4, 2), view(5, 2), view(6, 2)]
    plan = plan_update("blue_green", 3, 2, fleet, max_surge=1, max_unavailable=0)
    assert sorted(drained(plan)) == [1, 2, 3]
    assert plan.routable == {4, 5, 6}
    assert plan.launch == 0
    assert not plan.done
    after = [view(4, 2), view(5, 2), view(6, 2)] + [view(i, 1, R.SHUTTING_DOWN) for i in (1, 2, 3)]
    plan = plan_update("blue_green", 3, 2, after, max_surge=1, max_unavailable=0)
    assert summary(plan) == (0, [], {4, 5, 6})
    assert plan.done


def test_blue_green_with_several_old_versions() -> None:
    # A rolling update 1 -> 2 was half done when a blue-green update to 3 began.
    fleet = [view(1, 1), view(4, 2), view(5, 3), view(6, 3, R.STARTING)]
    plan = plan_update("blue_green", 2, 3, fleet, max_surge=1, max_unavailable=0)
    assert summary(plan) == (0, [], {1, 4})
    fleet[3] = view(6, 3)
    plan = plan_update("blue_green", 2, 3, fleet, max_surge=1, max_unavailable=0)
    assert drained(plan) == [1, 4]  # the oldest version first
    assert plan.routable == {5, 6}


def test_blue_green_replaces_a_failed_new_replica() -> None:
    fleet = [view(1, 1), view(2, 2), view(3, 2, R.FAILED)]
    plan = plan_update("blue_green", 2, 2, fleet, max_surge=0, max_unavailable=0)
    assert summary(plan) == (1, [], {1})


# --------------------------------------------------------------------- the simulator


@dataclass
class Sim:
    """A fleet that carries out plans: launched replicas start STARTING and, on the
    step drawn for them, become READY (or FAILED when a failure is drawn); drained
    ones are SHUTTING_DOWN for one step and then gone."""

    target: int
    version: int
    replicas: dict[int, ReplicaStatus]
    versions: dict[int, int]
    ready_at: dict[int, int] = field(default_factory=dict)
    fails: set[int] = field(default_factory=set)
    next_id: int = 1
    step: int = 0

    def views(self) -> list[ReplicaView]:
        return [ReplicaView(i, self.versions[i], s) for i, s in sorted(self.replicas.items())]

    def live(self) -> list[ReplicaView]:
        return [r for r in self.views() if r.status.is_live]

    def add(self, version: int, status: ReplicaStatus, delay: int, fail: bool = False) -> None:
        rid = self.next_id
        self.next_id += 1
        self.replicas[rid] = status
        self.versions[rid] = version
        self.ready_at[rid] = self.step + 1 + delay
        if fail:
            self.fails.add(rid)

    def advance(self) -> None:
        self.step += 1
        for rid, status in list(self.replicas.items()):
            if status is R.SHUTTING_DOWN:
                del self.replicas[rid]
            elif status in (R.STARTING, R.NOT_READY) and self.ready_at[rid] <= self.step:
                self.replicas[rid] = R.FAILED_INITIAL_DELAY if rid in self.fails else R.READY


@dataclass(frozen=True)
class Scenario:
    mode: Mode
    target: int
    surge: int
    unavailable: int
    sim: Sim


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    mode = draw(st.sampled_from(MODES))
    target = draw(st.integers(0, 6))
    surge = draw(st.integers(0, 3))
    unavailable = draw(st.integers(0 if surge else 1, 3))
    unavailable = min(unavailable, target)  # as ServiceSection.max_unavailable_count caps it
    version = draw(st.integers(2, 4))
    sim = Sim(target, version, {}, {})
    # Before the update: up to target (+ surge) replicas of older versions, mostly
    # READY, some still starting; maybe a few of the new version from a previous
    # controller's run; and some stopped or failed ones that must be ignored.
    old_count = draw(st.integers(0, target + surge))
    for _ in range(old_count):
        status = draw(st.sampled_from([R.READY, R.READY, R.READY, R.STARTING, R.NOT_READY]))
        sim.add(draw(st.integers(1, version - 1)), status, draw(st.integers(0, 3)))
    new_count = draw(st.integers(0, min(target, target + surge - old_count)))
    for _ in range(new_count):
        sim.add(version, draw(st.sampled_from([R.READY, R.STARTING])), draw(st.integers(0, 3)))
    for _ in range(draw(st.integers(0, 2))):
        sim.add(
            draw(st.integers(1, version)),
            draw(st.sampled_from([R.SHUTTING_DOWN, R.FAILED, R.FAILED_PROBING])),
            0,
        )
    sim.step = 0
    return Scenario(mode, target, surge, unavailable, sim)


MAX_STEPS = 200


def run_update(scenario: Scenario, data: st.DataObject, failures: int) -> None:
    """Carry out plans until done, checking every invariant on the way."""
    mode, target, sim = scenario.mode, scenario.target, scenario.sim
    kw = {"max_surge": scenario.surge, "max_unavailable": scenario.unavailable}
    effective_unavailable = scenario.unavailable or (1 if target and not scenario.surge else 0)
    ready_before = [r for r in sim.live() if r.status is R.READY]
    if mode == "rolling":
        floor = min(target, len(ready_before)) - effective_unavailable
    else:
        # Blue-green never gives up capacity: the old version serves at full strength
        # until the new one does (new replicas left READY by an earlier run are not
        # routed while old ones are live, so they do not count here).
        old_live = any(r.version != sim.version for r in sim.live())
        floor = min(target, sum(1 for r in ready_before if old_live != (r.version == sim.version)))
    ever_drained: set[int] = set()
    new_routed = False
    for _ in range(MAX_STEPS):
        views = sim.views()
        plan = plan_update(mode, target, sim.version, views, **kw)
        assert plan_update(mode, target, sim.version, list(reversed(views)), **kw) == plan
        by_id = {r.id: r for r in views}
        # Routable: live READY replicas only, never one that was drained.
        assert all(by_id[i].status is R.READY for i in plan.routable)
        assert not plan.routable & ever_drained
        drain_ids = [rid for rid, _ in plan.drain]
        assert len(set(drain_ids)) == len(drain_ids)
        assert all(by_id[i].status.is_live for i in drain_ids)
        assert not plan.routable & set(drain_ids)
        assert plan.launch >= 0
        # Capacity: READY routable replicas never below the floor.
        assert len(plan.routable) >= floor
        routed_versions = {by_id[i].version for i in plan.routable}
        if mode == "blue_green":
            assert not (sim.version in routed_versions and len(routed_versions) > 1)
            if new_routed:
                assert routed_versions <= {sim.version}
            new_routed = new_routed or sim.version in routed_versions
        if plan.done:
            live = sim.live()
            assert not drain_ids and plan.launch == 0
            assert len(live) == target
            assert all(r.version == sim.version and r.status is R.READY for r in live)
            assert plan.routable == {r.id for r in live}
            return
        # Carry out the plan.
        for rid in drain_ids:
            sim.replicas[rid] = R.SHUTTING_DOWN
        ever_drained.update(drain_ids)
        for _ in range(plan.launch):
            fail = failures > 0 and data.draw(st.booleans())
            failures -= fail
            sim.add(sim.version, R.STARTING, data.draw(st.integers(0, 3)), fail)
        if mode == "rolling":
            assert len(sim.live()) <= target + scenario.surge
        sim.advance()
    raise AssertionError(f"not done after {MAX_STEPS} steps: {sim.views()}")


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data())
def test_healthy_update_keeps_capacity_and_ends_done(
    scenario: Scenario, data: st.DataObject
) -> None:
    run_update(scenario, data, failures=0)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data(), st.integers(1, 4))
def test_update_with_failing_new_replicas_relaunches_and_ends_done(
    scenario: Scenario, data: st.DataObject, failures: int
) -> None:
    # New replicas that fail before they are ever READY take no capacity away, so
    # the same invariants hold; the planner simply launches replacements.
    run_update(scenario, data, failures=failures)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(MODES),
    st.integers(0, 6),
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from(list(ReplicaStatus))), max_size=12),
    st.integers(0, 3),
    st.integers(0, 3),
)
def test_any_fleet_gets_a_sound_plan(
    mode: Mode,
    target: int,
    version: int,
    fleet: list[tuple[int, ReplicaStatus]],
    surge: int,
    unavailable: int,
) -> None:
    views = [ReplicaView(i + 1, v, s) for i, (v, s) in enumerate(fleet)]
    plan = plan_update(mode, target, version, views, max_surge=surge, max_unavailable=unavailable)
    assert plan == plan_update(
        mode, target, version, views, max_surge=surge, max_unavailable=unavailable
    )
    by_id = {r.id: r for r in views}
    drain_ids = {rid for rid, _ in plan.drain}
    assert all(by_id[i].status is R.READY for i in plan.routable)
    assert all(by_id[i].status.is_live for i in drain_ids)
    assert not plan.routable & drain_ids
    live_after = [r for r in views if r.status.is_live and r.id not in drain_ids]
    new_after = [r for r in live_after if r.version == version]
    assert len(new_after) + plan.launch <= target
    if mode == "rolling":
        allowed = max(target + surge, len(live_after))
        assert len(live_after) + plan.launch <= allowed
    else:
        assert len(new_after) + plan.launch == target
        versions = {by_id[i].version for i in plan.routable}
        assert not (version in versions and len(versions) > 1)
    live = [r for r in views if r.status.is_live]
    assert plan.done == (
        len(live) == target and all(r.version == version and r.status is R.READY for r in live)
    )


# ------------------------------------------------------------------ canary


def _views(spec: list[tuple[int, int, ReplicaStatus]]) -> list[ReplicaView]:
    return [ReplicaView(i, v, s) for i, v, s in spec]


def test_canary_keeps_the_stable_target_and_sizes_the_new_version() -> None:
    R = ReplicaStatus.READY
    views = _views([(1, 1, R), (2, 1, R), (3, 1, R), (4, 1, R)])
    step = plan_canary(4, 2, views, new_count=1, complete=False)
    assert (step.launch, step.drain, step.done) == (1, (), False)
    views += _views([(5, 2, R)])
    step = plan_canary(4, 2, views, new_count=2, complete=False)
    assert step.launch == 1 and not step.drain and step.routable == {1, 2, 3, 4, 5}
    # Complete, but not all new replicas READY yet: the old ones stay.
    views += _views([(6, 2, R), (7, 2, ReplicaStatus.STARTING)])
    step = plan_canary(4, 2, views, new_count=2, complete=True)
    assert step.launch == 1 and not step.drain
    views = [v for v in views if v.id != 7] + _views([(7, 2, R), (8, 2, R)])
    step = plan_canary(4, 2, views, new_count=2, complete=True)
    assert {rid for rid, _ in step.drain} == {1, 2, 3, 4} and step.routable == {5, 6, 7, 8}


def test_canary_scaling_down_drains_the_unready_new_replicas_first() -> None:
    R, S = ReplicaStatus.READY, ReplicaStatus.STARTING
    views = _views([(1, 1, R), (2, 2, R), (3, 2, S), (4, 2, R)])
    step = plan_canary(2, 2, views, new_count=1, complete=False)
    assert step.drain[0][0] == 3 and len(step.drain) == 2


@settings(max_examples=200, deadline=None)
@given(
    target=st.integers(0, 6),
    new_count=st.integers(0, 8),
    complete=st.booleans(),
    spec=st.lists(st.tuples(st.integers(1, 3), st.sampled_from(list(ReplicaStatus))), max_size=12),
)
def test_canary_never_drains_a_ready_stable_replica_before_the_end(
    target: int, new_count: int, complete: bool, spec: list[tuple[int, ReplicaStatus]]
) -> None:
    views = [ReplicaView(i + 1, v, s) for i, (v, s) in enumerate(spec)]
    step = plan_canary(target, 3, views, new_count=new_count, complete=complete)
    drained = {rid for rid, _ in step.drain}
    old_ready = {v.id for v in views if v.version != 3 and v.status is ReplicaStatus.READY}
    if drained & old_ready:
        new_ready = [v for v in views if v.version == 3 and v.status is ReplicaStatus.READY]
        assert complete and len(new_ready) >= target
    new_ids = {v.id for v in views if v.version == 3 and v.status.is_live}
    wanted = target if complete else min(new_count, target)
    # The new version ends up with exactly the replicas the weight (or the end) needs.
    assert len(new_ids) - len(drained & new_ids) + step.launch == wanted
    assert not (step.routable & drained)


def test_blue_green_holds_the_switch_and_keeps_the_old_version_warm() -> None:
    R = ReplicaStatus.READY
    views = _views([(1, 1, R), (2, 1, R), (3, 2, R), (4, 2, R)])
    held = plan_update(
        "blue_green", 2, 2, views, max_surge=2, max_unavailable=0, switch_allowed=False
    )
    assert held.routable == {1, 2} and not held.drain and not held.done
    warm = plan_update("blue_green", 2, 2, views, max_surge=2, max_unavailable=0, keep_old=True)
    assert warm.routable == {3, 4} and not warm.drain and not warm.done and warm.launch == 0
    switched = plan_update("blue_green", 2, 2, views, max_surge=2, max_unavailable=0)
    assert switched.routable == {3, 4} and {rid for rid, _ in switched.drain} == {1, 2}
