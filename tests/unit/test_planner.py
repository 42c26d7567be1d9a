"""The steady-state planner: every combination of replica states, checked by property."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.core.planner import KEEP_FAILED, ReplicaView, plan_steady, service_status
from steadyserve.core.states import ReplicaStatus, ServiceStatus

STATUSES = list(ReplicaStatus)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[int, int, list[ReplicaView]]:
    version = draw(st.integers(1, 4))
    count = draw(st.integers(0, 12))
    replicas = [
        ReplicaView(i + 1, draw(st.integers(1, version)), draw(st.sampled_from(STATUSES)))
        for i in range(count)
    ]
    return draw(st.integers(0, 8)), version, replicas


@given(fleets(), st.booleans())
def test_plan_reaches_target_with_current_version_only(
    fleet: tuple[int, int, list[ReplicaView]], broken: bool
) -> None:
    target, version, replicas = fleet
    plan = plan_steady(target, version, replicas, version_broken=broken)
    stopped = {rid for rid, _ in plan.drain}
    by_id = {r.id: r for r in replicas}
    # Only live replicas are stopped, and every live replica of an old version is.
    assert all(by_id[rid].status.is_live for rid in stopped)
    assert {r.id for r in replicas if r.status.is_live and r.version != version} <= stopped
    kept = [r for r in replicas if r.status.is_live and r.id not in stopped]
    assert all(r.version == version for r in kept)
    if broken:
        assert plan.launch == 0
        assert len(kept) <= target
    else:
        assert len(kept) + plan.launch == target
    # Routable: exactly the kept READY replicas.
    assert plan.routable == {r.id for r in kept if r.status is ReplicaStatus.READY}
    # Failed replicas: only failed ones forgotten, at most KEEP_FAILED of the current version kept.
    assert all(by_id[rid].status.is_failed for rid in plan.forget)
    listed_failed = [r for r in replicas if r.status.is_failed and r.id not in plan.forget]
    assert len(listed_failed) <= KEEP_FAILED
    assert all(r.version == version for r in listed_failed)


@given(fleets())
def test_scale_down_stops_unready_before_ready(fleet: tuple[int, int, list[ReplicaView]]) -> None:
    target, version, replicas = fleet
    plan = plan_steady(target, version, replicas, version_broken=False)
    stopped = {rid for rid, _ in plan.drain}
    current = [r for r in replicas if r.status.is_live and r.version == version]
    ready_stopped = [r for r in current if r.id in stopped and r.status is ReplicaStatus.READY]
    unready_kept = [
        r for r in current if r.id not in stopped and r.status is not ReplicaStatus.READY
    ]
    assert not (ready_stopped and unready_kept)


def test_broken_version_is_not_relaunched() -> None:
    replicas = [ReplicaView(1, 1, ReplicaStatus.FAILED), ReplicaView(2, 1, ReplicaStatus.FAILED)]
    assert plan_steady(2, 1, replicas, version_broken=True).launch == 0
    assert plan_steady(2, 1, replicas, version_broken=False).launch == 2


def test_service_status_order() -> None:
    ready = [ReplicaView(1, 1, ReplicaStatus.READY)]
    starting = [ReplicaView(1, 1, ReplicaStatus.STARTING)]
    kw = {"target": 1, "version_broken": False}
    assert (
        service_status(
            shutting_down=True, lb_ready=True, replicas=ready, routable=frozenset({1}), **kw
        )
        is ServiceStatus.SHUTTING_DOWN
    )
    assert (
        service_status(
            shutting_down=False, lb_ready=False, replicas=ready, routable=frozenset({1}), **kw
        )
        is ServiceStatus.CONTROLLER_INIT
    )
    assert (
        service_status(
            shutting_down=False, lb_ready=True, replicas=ready, routable=frozenset({1}), **kw
        )
        is ServiceStatus.READY
    )
    assert (
        service_status(
            shutting_down=False, lb_ready=True, replicas=starting, routable=frozenset(), **kw
        )
        is ServiceStatus.REPLICA_INIT
    )
    assert (
        service_status(
            shutting_down=False,
            lb_ready=True,
            replicas=[],
            routable=frozenset(),
            target=1,
            version_broken=True,
        )
        is ServiceStatus.FAILED
    )
    assert (
        service_status(
            shutting_down=False,
            lb_ready=True,
            replicas=[],
            routable=frozenset(),
            target=0,
            version_broken=False,
        )
        is ServiceStatus.NO_REPLICA
    )
