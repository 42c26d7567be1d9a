"""SkyServe's instance-aware autoscaler (core/autoscale/instance_aware.py): the
replicas a rate needs from the capacity of the replicas that exist, the
hysteresis and bounds it shares with the request-rate autoscaler, and the
accelerator a replica holding inventory GPUs is sized by. Simulated time only."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller.autoscaler import capacities_of, fleet_of, policy_label
from steadyserve.controller.routing import replica_accelerator, route_table
from steadyserve.core.autoscale import (
    LoadSample,
    LoadWindow,
    QpsPolicy,
    ReplicaLoad,
    ScaleState,
    decide,
)
from steadyserve.core.autoscale.instance_aware import FleetReplica, capacity, needed
from steadyserve.core.capacity import Assignment
from steadyserve.core.planner import ReplicaView, plan_steady
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ServiceSpec, SpecError, parse_service
from steadyserve.spec.autoscaling import policy_for
from steadyserve.store import ReplicaRow

AV = {"A100": 10.0, "V100": 5.0}


def ready(*accelerators: str | None) -> list[FleetReplica]:
    return [FleetReplica(a, True) for a in accelerators]


# ------------------------------------------------------------------ the sizing rule


def test_skypilots_example_two_replicas_short_of_20_qps_need_a_third() -> None:
    """1200 requests in 60 s: A100 10 + V100 5 = 15 <= 20; 2 + ceil(5 / 10) = 3."""
    assert needed(AV, 20.0, ready("A100", "V100")) == 3


def test_a_new_replica_is_assumed_to_land_on_the_best_accelerator() -> None:
    # 40 qps over one V100 (5): 35 more at the A100's 10 each is 4 more, not 7.
    assert needed(AV, 40.0, ready("V100")) == 5


def test_below_capacity_the_largest_ready_replicas_are_kept_first() -> None:
    fleet = ready("V100", "A100", "V100")  # 20 in all
    assert needed(AV, 9.0, fleet) == 1  # the A100 alone carries more than 9
    assert needed(AV, 12.0, fleet) == 2  # A100 + V100 = 15 > 12
    assert needed(AV, 15.0, fleet) == 3  # 15 is not more than 15: SkyPilot keeps one more
    assert needed(AV, 0.0, fleet) == 1


def test_below_capacity_only_ready_replicas_count_as_kept() -> None:
    fleet = [FleetReplica("A100", False), FleetReplica("V100", True)]
    # 15 in all > 4; the one READY V100 (5) carries 4.
    assert needed(AV, 4.0, fleet) == 1
    # Nothing READY: one replica at the best target.
    assert needed(AV, 4.0, [FleetReplica("A100", False), FleetReplica("V100", False)]) == 1


def test_no_live_replica_sizes_the_rate_by_the_best_target() -> None:
    """SkyPilot's later fix (docstring): with no capacity, ceil(rate / best)."""
    assert needed(AV, 0.0, []) == 0
    assert needed(AV, 25.0, []) == 3


def test_keys_with_counts_match_by_name_and_unknown_is_the_slowest() -> None:
    targets = {"H100:1": 10.0, "L4": 3.0, "H100:8": 80.0}
    assert capacity(targets, "H100") == 10.0  # the first key named H100
    assert capacity(targets, "L4") == 3.0
    assert capacity(targets, "A10G") == 3.0  # not named: the smallest target
    assert capacity(targets, None) == 3.0  # no accelerator known
    assert capacity({"H100:1": 10.0, "H100": 7.0}, "H100") == 7.0  # the exact key first


rates = st.integers(min_value=0, max_value=400).map(float)
accels = st.lists(st.sampled_from(["A100", "V100", "T4", None]), max_size=8)
readies = st.lists(st.booleans(), min_size=8, max_size=8)


def fleet_from(names: list[str | None], flags: list[bool]) -> list[FleetReplica]:
    return [FleetReplica(a, r) for a, r in zip(names, flags, strict=False)]


@given(rates, rates, accels, readies)
def test_more_load_never_asks_for_fewer(
    a: float, b: float, names: list[str | None], flags: list[bool]
) -> None:
    fleet = fleet_from(names, flags)
    low, high = sorted((a, b))
    assert needed(AV, low, fleet) <= needed(AV, high, fleet)


@given(rates, accels, readies)
def test_the_answer_carries_the_rate_and_no_fewer_would(
    rate: float, names: list[str | None], flags: list[bool]
) -> None:
    fleet = fleet_from(names, flags)
    count = needed(AV, rate, fleet)
    caps = [capacity(AV, r.accelerator) for r in fleet]
    total = sum(caps)
    if not fleet:
        assert count == math.ceil(rate / 10.0)
    elif rate >= total:
        # Every live replica, and enough best-accelerator replicas for the rest.
        extra = count - len(fleet)
        assert total + extra * 10.0 >= rate > total + (extra - 1) * 10.0 or extra == 0
    else:
        kept = sorted((c for c, r in zip(caps, fleet, strict=True) if r.ready), reverse=True)
        kept = kept or [10.0]
        assert 1 <= count <= len(kept)
        assert sum(kept[: count - 1]) <= rate
        assert sum(kept[:count]) > rate or count == len(kept)


@given(st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=300))
def test_one_accelerator_is_the_plain_rule_but_an_exact_multiple_keeps_one_more(
    n: int, rate: int
) -> None:
    """All replicas alike (q = 5): at or above their capacity, ceil(rate / q) as
    the request-rate autoscaler; below it, floor(rate / q) + 1."""
    count = needed({"A100": 5.0}, float(rate), ready(*["A100"] * n))
    if rate >= 5 * n:
        assert count == math.ceil(rate / 5)
    else:
        assert count == rate // 5 + 1


# ------------------------------------------------------------------ decisions over time


def policy(**over: Any) -> QpsPolicy:
    fields: dict[str, Any] = {
        "min_replicas": 1,
        "max_replicas": 10,
        "target_qps_per_replica": 10.0,
        "upscale_delay_seconds": 40.0,
        "downscale_delay_seconds": 60.0,
        "per_accelerator": tuple(AV.items()),
    }
    fields.update(over)
    return QpsPolicy(**fields)


def load(window: LoadWindow, now: float, qps: float) -> None:
    """One report at ``now`` of the requests a steady ``qps`` started in the last second."""
    window.add(LoadSample(now, (ReplicaLoad(1, started=round(qps)),)))


def run_decisions(
    p: QpsPolicy, start: int, qps: float, fleet: list[FleetReplica], seconds: int
) -> list[tuple[float, int, str]]:
    """Decide every second for ``seconds`` of simulated time at a steady ``qps``."""
    window = LoadWindow(span=p.window_s)
    state = ScaleState(start)
    changes: list[tuple[float, int, str]] = []
    t0 = 1_000.0
    for s in range(-59, 0):  # a full window of the steady load first
        load(window, t0 + s, qps)
    for s in range(seconds):
        now = t0 + s
        load(window, now, qps)
        d = decide(p, state, window, now, len(fleet), fleet=fleet)
        state = d.next_state
        if d.changed:
            changes.append((now - t0, d.target, d.reason))
    return changes


def test_upscale_waits_its_consecutive_decisions_then_sizes_by_capacity() -> None:
    # 40 s delay / 20 s interval: the target moves on the second decision (t = 20).
    changes = run_decisions(policy(), 2, 20.0, ready("A100", "V100"), 100)
    assert changes == [
        (20.0, 3, "qps 20.0 over 60 s / capacity 15 of 2 replicas -> 3 replicas"),
    ]


def test_downscale_keeps_the_large_replicas_capacity_in_mind() -> None:
    # 3 replicas (A100, V100, V100) at 8 qps: the A100 alone carries it. A 60 s
    # delay is 3 decisions 20 s apart: t = 0, 20, 40.
    fleet = ready("A100", "V100", "V100")
    changes = run_decisions(policy(), 3, 8.0, fleet, 100)
    assert changes == [(40.0, 1, "qps 8.0 over 60 s / capacity 20 of 3 replicas -> 1 replica")]


def test_bounds_clip_and_say_so() -> None:
    changes = run_decisions(policy(max_replicas=3, upscale_delay_seconds=0), 2, 90.0, [], 5)
    assert changes == [
        (0.0, 3, "qps 90.0 over 60 s / capacity 0 of 0 replicas -> 3 replicas (max_replicas 3)")
    ]


def test_burst_measures_the_ready_replicas_capacity() -> None:
    """Burst mode: the short-window rate over twice what the READY replicas carry
    (A100 + V100 = 15), not twice the best target times their count (20)."""
    p = policy(burst=True)
    window = LoadWindow(span=p.window_s)
    for s in range(6):  # 6 s at 35 qps: the short window (6 s) reads 35 > 2 * 15
        load(window, 1_000.0 + s, 35.0)
    d = decide(p, ScaleState(2), window, 1_005.0, 2, fleet=ready("A100", "V100"))
    assert d.burst and d.target == 4  # 2 + ceil((35 - 15) / 10)
    assert d.reason == "burst: qps 35.0 over 6 s / capacity 15 of 2 replicas -> 4 replicas"


# ------------------------------------------------------------------ the controller's view


def spec(targets: Any, resources: dict[str, Any] | None = None) -> ServiceSpec:
    data: dict[str, Any] = {
        "run": "x",
        "service": {
            "readiness_probe": "/",
            "load_balancing_policy": "instance_aware_least_load",
            "replica_policy": {
                "min_replicas": 1,
                "max_replicas": 8,
                "target_qps_per_replica": targets,
            },
        },
    }
    if resources is not None:
        data["resources"] = resources
    return parse_service(data, base_dir=Path("."))


def row(rid: int, status: ReplicaStatus, device: str | None, version: int = 1) -> ReplicaRow:
    held = Assignment(gpus=(rid,), uuids=(f"GPU-{rid}",), accelerator=device) if device else None
    return ReplicaRow(
        id=rid,
        service="svc",
        version=version,
        status=status,
        ip="127.0.0.1",
        launched_at=0.0,
        port=9000 + rid,
        assignment=held.to_json() if held else None,
    )


MIXED = {"accelerators": ["A100:1", "V100:1"]}


def test_a_replica_holding_inventory_gpus_is_sized_by_the_name_it_asked_for() -> None:
    """The inventory names a device ``NVIDIA A100-SXM4-80GB``; the map says ``A100``.
    The replica's accelerator is the spec's name its GPUs matched, as SkyPilot's
    launched resources say ``A100``, so both the autoscaler and the load balancer
    read the A100's target (not the fallbacks)."""
    s = spec({"A100": 10, "V100": 5}, MIXED)
    a100 = row(1, ReplicaStatus.READY, "NVIDIA A100-SXM4-80GB")
    v100 = row(2, ReplicaStatus.READY, "Tesla V100-SXM2-16GB")
    assert replica_accelerator(s, a100) == "A100"
    assert replica_accelerator(s, v100) == "V100"
    table = route_table(s, [a100, v100], frozenset({1, 2}), hold_at_zero=False)
    assert [(r.accelerator, r.capacity) for r in table.replicas] == [("A100", 10.0), ("V100", 5.0)]


def test_the_fleet_is_the_current_versions_replicas_that_carry_or_will() -> None:
    s = spec({"A100": 10, "V100": 5}, MIXED)
    rows = [
        row(1, ReplicaStatus.READY, "NVIDIA A100-SXM4-80GB"),
        row(2, ReplicaStatus.STARTING, "Tesla V100-SXM2-16GB"),
        row(3, ReplicaStatus.PENDING, None),  # waits for a GPU: the spec's first choice
        row(4, ReplicaStatus.NOT_READY, "NVIDIA A100-SXM4-80GB"),
        row(5, ReplicaStatus.SHUTTING_DOWN, "NVIDIA A100-SXM4-80GB"),
        row(6, ReplicaStatus.READY, "NVIDIA A100-SXM4-80GB", version=0),
    ]
    assert fleet_of(s, rows, 1) == [
        FleetReplica("A100", True),
        FleetReplica("V100", False),
        FleetReplica("A100", False),
    ]


def test_the_policy_and_its_label_keep_the_map() -> None:
    p = policy_for(spec({"H100:1": 10, "L4": 3}).service)
    assert isinstance(p, QpsPolicy)
    assert p.targets == {"H100:1": 10.0, "L4": 3.0} and p.target_qps_per_replica == 10.0
    assert policy_label(p) == "qps H100:1 10, L4 3/replica [1..8]"


def test_two_keys_for_one_accelerator_are_refused_in_one_line() -> None:
    """Keys match by name (the count is not read), so the second of ``A100:1`` and
    ``A100:2`` could never apply: refused, naming the field."""
    with pytest.raises(SpecError) as err:
        spec({"A100:1": 10, "A100:2": 20})
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        "service.replica_policy.target_qps_per_replica: keys 'A100:1' and 'A100:2' both name"
        " A100 (a replica is matched by its accelerator's name; give each accelerator one target)"
    )


def test_scaling_down_stops_the_smaller_capacity_first_then_the_newest() -> None:
    """SkyServe's ``_select_replicas_to_scale_down_by_qps``: status, then capacity
    ascending, then the newest. Without capacities the order is as before."""
    views = [
        ReplicaView(1, 1, ReplicaStatus.READY),
        ReplicaView(2, 1, ReplicaStatus.READY),
        ReplicaView(3, 1, ReplicaStatus.READY),
        ReplicaView(4, 1, ReplicaStatus.STARTING),
    ]
    carries = {1: 5.0, 2: 5.0, 3: 10.0, 4: 10.0}
    plan = plan_steady(1, 1, views, version_broken=False, capacities=carries)
    assert [rid for rid, _ in plan.drain] == [4, 2, 1]
    plain = plan_steady(1, 1, views, version_broken=False)
    assert [rid for rid, _ in plain.drain] == [4, 3, 2]


def test_capacities_are_read_only_with_a_per_accelerator_target() -> None:
    s = spec({"A100": 10, "V100": 5}, MIXED)
    rows = [
        row(1, ReplicaStatus.READY, "Tesla V100-SXM2-16GB"),
        row(2, ReplicaStatus.PENDING, None),
    ]
    assert capacities_of(s, rows) == {1: 5.0, 2: 10.0}
    single = parse_service(
        {"run": "x", "service": {"readiness_probe": "/", "replicas": 2}}, base_dir=Path(".")
    )
    assert capacities_of(single, rows) == {}
