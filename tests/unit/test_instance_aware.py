"""instance_aware_least_load: the policy, the spec's per-accelerator target, the
route table's accelerator and capacity, and what the map means to the autoscaler."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller.routing import replica_accelerator, route_table
from steadyserve.core.autoscale import QpsPolicy
from steadyserve.core.autoscale.instance_aware import capacity
from steadyserve.core.routing.instance_aware import (
    InstanceAwareLeastLoad,
    capacity_for,
    normalized_load,
    target_qps_for,
)
from steadyserve.core.routing.registry import make_policy
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ServiceSpec, SpecError, parse_service
from steadyserve.spec.autoscaling import policy_for
from steadyserve.store import ReplicaRow
from steadyserve.wire.routes import RouteTable

IA = "instance_aware_least_load"


@dataclass
class Cand:
    id: int
    inflight: int
    version: int = 1
    capacity: float = 1.0
    accelerator: str | None = None


def spec(targets: Any, resources: dict[str, Any] | None = None) -> ServiceSpec:
    service = {
        "load_balancing_policy": IA,
        "replica_policy": {"min_replicas": 1, "max_replicas": 8, "target_qps_per_replica": targets},
    }
    return parse_service(
        {"run": "x", "service": service, "resources": resources or {}}, base_dir=Path("/x")
    )


# ------------------------------------------------------------------ the policy


candidates = st.lists(
    st.builds(
        Cand,
        id=st.integers(0, 10_000),
        inflight=st.integers(0, 20),
        capacity=st.sampled_from([0.5, 1.0, 3.0, 10.0]),
    ),
    max_size=8,
    unique_by=lambda c: c.id,
)


@given(candidates, st.integers(0, 20), st.sets(st.integers(0, 10_000), max_size=4))
def test_the_pick_is_eligible_and_has_the_least_normalized_load(
    cands: list[Cand], max_ongoing: int, exclude: set[int]
) -> None:
    eligible = [
        c for c in cands if c.id not in exclude and (max_ongoing <= 0 or c.inflight < max_ongoing)
    ]
    chosen = InstanceAwareLeastLoad().choose(cands, max_ongoing, exclude)
    if not eligible:
        assert chosen is None
        return
    assert chosen in eligible
    least = min(normalized_load(c.inflight, c.capacity) for c in eligible)
    assert normalized_load(chosen.inflight, chosen.capacity) == least


def test_a_bigger_replica_takes_proportionally_more_requests() -> None:
    """Requests that stay in flight split by capacity: 10 vs 3 -> 10 of 13 on the H100."""
    h100, l4 = Cand(1, 0, capacity=10.0), Cand(2, 0, capacity=3.0)
    policy = InstanceAwareLeastLoad()
    for _ in range(13):
        chosen = policy.choose([h100, l4], 0)
        assert chosen is not None
        chosen.inflight += 1
    assert (h100.inflight, l4.inflight) == (10, 3)


def test_ties_rotate_so_sequential_traffic_reaches_every_replica() -> None:
    cands = [Cand(1, 0, capacity=2.0), Cand(2, 0, capacity=2.0), Cand(3, 0, capacity=2.0)]
    policy = InstanceAwareLeastLoad()
    seen = set()
    for _ in range(3):
        chosen = policy.choose(cands, 100)
        assert chosen is not None
        seen.add(chosen.id)
    assert seen == {1, 2, 3}


def test_make_policy_builds_it() -> None:
    assert isinstance(make_policy(IA), InstanceAwareLeastLoad)


def test_targets_match_with_and_without_counts() -> None:
    targets = {"H100:1": 10.0, "L4": 3.0}
    assert target_qps_for("H100", targets) == 10.0
    assert target_qps_for("L4", targets) == 3.0
    assert target_qps_for("A10G", targets) == 1.0
    assert target_qps_for(None, targets) == 1.0
    assert capacity_for("H100", {"H100": 0.0}) == 1.0


# ------------------------------------------------------------------ the spec


def test_the_map_is_accepted_with_keys_with_and_without_counts() -> None:
    policy = spec({"H100:1": 10, "L4": 3}).service.replica_policy
    assert policy is not None and policy.target_qps_per_replica == {"H100:1": 10.0, "L4": 3.0}


def policy(target: Any, **more: Any) -> dict[str, Any]:
    return {"min_replicas": 1, "max_replicas": 2, "target_qps_per_replica": target, **more}


@pytest.mark.parametrize(
    ("service", "field"),
    [
        ({"replica_policy": policy({"L4": 3})}, "instance_aware_least_load"),
        ({"load_balancing_policy": IA}, "target_qps_per_replica as a mapping"),
        ({"load_balancing_policy": IA, "replica_policy": policy(2)}, "as a mapping"),
        ({"load_balancing_policy": IA, "replica_policy": policy({"L4": 0})}, "[L4] must be"),
        ({"load_balancing_policy": IA, "replica_policy": policy({"L4 x": 1})}, "key 'L4 x'"),
        ({"load_balancing_policy": IA, "replica_policy": policy({})}, "a number > 0 or a map"),
        (
            {"load_balancing_policy": IA, "replica_policy": policy({"L4": 3}, max_replicas=None)},
            "target_qps_per_replica needs max_replicas",
        ),
    ],
)
def test_bad_maps_are_one_line_naming_the_field(service: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_service({"run": "x", "service": service}, base_dir=Path("/x"))
    assert field in str(err.value) and "\n" not in str(err.value)


def test_the_scalar_form_is_unchanged() -> None:
    service = {
        "replica_policy": {"min_replicas": 1, "max_replicas": 3, "target_qps_per_replica": 2.5}
    }
    parsed = parse_service({"run": "x", "service": service}, base_dir=Path("/x"))
    assert parsed.service.replica_policy is not None
    assert parsed.service.replica_policy.target_qps_per_replica == 2.5


# ------------------------------------------------------------------ the route table


def row(rid: int, port: int) -> ReplicaRow:
    return ReplicaRow("s", rid, 1, ReplicaStatus.READY, 0.0, port=port)


def test_routes_carry_the_accelerator_and_its_target_as_capacity() -> None:
    s = spec({"H100:1": 10, "L4": 3}, {"accelerators": "L4:1"})
    table = route_table(s, [row(1, 9001), row(2, 9002)], frozenset({1, 2}), hold_at_zero=False)
    assert [(r.accelerator, r.capacity) for r in table.replicas] == [("L4", 3.0), ("L4", 3.0)]
    assert table.policy == IA
    back = RouteTable.from_json(table.to_json())
    assert [(r.accelerator, r.capacity) for r in back.replicas] == [("L4", 3.0), ("L4", 3.0)]


def test_an_accelerator_the_map_does_not_name_weighs_one() -> None:
    s = spec({"H100:1": 10}, {"accelerators": "A10G"})
    table = route_table(s, [row(1, 9001)], frozenset({1}), hold_at_zero=False)
    assert (table.replicas[0].accelerator, table.replicas[0].capacity) == ("A10G", 1.0)


def test_without_a_map_routes_stay_as_before() -> None:
    service = {"replicas": 1}
    s = parse_service({"run": "x", "service": service}, base_dir=Path("/x"))
    table = route_table(s, [row(1, 9001)], frozenset({1}), hold_at_zero=False)
    assert table.replicas[0].to_json() == {"id": 1, "version": 1, "host": "127.0.0.1", "port": 9001}


def test_replica_accelerator_reads_accelerators_then_any_of() -> None:
    assert replica_accelerator(spec({"L4": 3}, {"accelerators": {"H100": 1}}), None) == "H100"
    assert replica_accelerator(spec({"L4": 3}, {"accelerators": ["L4:1", "A10G:1"]}), None) == "L4"
    alternatives = {"any_of": [{"cpus": 2}, {"accelerators": "A100:1"}]}
    assert replica_accelerator(spec({"L4": 3}, alternatives), None) == "A100"
    assert replica_accelerator(spec({"L4": 3}), None) is None


# ------------------------------------------------------------------ the autoscaler


def test_the_autoscaler_keeps_the_map_and_assumes_the_best_for_a_new_replica() -> None:
    s = spec({"H100:1": 10, "L4": 3}, {"accelerators": "L4:1"})
    policy = policy_for(s.service)
    pairs = (("H100:1", 10.0), ("L4", 3.0))
    assert policy == QpsPolicy(1, 8, 10.0, per_accelerator=pairs)
    assert policy.targets == {"H100:1": 10.0, "L4": 3.0}


def test_an_unknown_accelerator_is_sized_as_the_slowest() -> None:
    """SkyServe's instance-aware autoscaler falls back to the map's smallest target."""
    assert capacity({"H100:1": 10.0, "L4": 3.0}, "A10G") == 3.0
    assert capacity({"H100:1": 10.0, "L4": 3.0}, None) == 3.0
    assert capacity({"H100:1": 10.0, "L4": 3.0}, "H100") == 10.0
