"""Model multiplexing's routing, pure: the policy (core/routing/multiplex.py), the
load balancer's use of it (only for a multiplexed table), and the controller's
record of which replica holds which model (controller/multiplexed.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller.multiplexed import ModelReports
from steadyserve.controller.routing import route_table
from steadyserve.core.routing.multiplex import ModelAffinity, model_id_of
from steadyserve.core.routing.policies import has_room
from steadyserve.core.states import ReplicaStatus
from steadyserve.lb.balancer import Balancer
from steadyserve.spec import parse_service
from steadyserve.store import ReplicaRow
from steadyserve.wire.routes import ReplicaRoute, RouteTable

HEAD = b"GET / HTTP/1.1\r\nhost: x\r\nserve_multiplexed_model_id: m1\r\n\r\n"


@dataclass
class _C:
    id: int
    inflight: int = 0
    version: int = 1
    capacity: float = 1.0
    accelerator: str | None = None


MODELS = st.sampled_from(["a", "b", "c"])
replica_sets = st.lists(
    st.tuples(st.integers(0, 6), st.frozensets(MODELS, max_size=3)), min_size=0, max_size=5
)


@given(
    replicas=replica_sets,
    max_ongoing=st.integers(0, 6),
    exclude=st.frozensets(st.integers(0, 4), max_size=3),
    remembered=st.lists(st.tuples(st.integers(0, 4), MODELS), max_size=4),
    key=st.none() | MODELS,
)
def test_the_policy_picks_a_holder_with_room_else_the_least_loaded(
    replicas: list[tuple[int, frozenset[str]]],
    max_ongoing: int,
    exclude: frozenset[int],
    remembered: list[tuple[int, str]],
    key: str | None,
) -> None:
    candidates = [_C(i, inflight) for i, (inflight, _) in enumerate(replicas)]
    reports = {i: models for i, (_, models) in enumerate(replicas)}
    policy = ModelAffinity(reported=reports)
    for rid, model in remembered:
        policy._touch(rid, model)
    eligible = [c for c in candidates if has_room(c.inflight, max_ongoing) and c.id not in exclude]

    picked = policy.choose(candidates, max_ongoing, exclude, key)

    if not eligible:
        assert picked is None
        return
    assert picked in eligible  # never full, never excluded, None only if none is eligible
    least = min(c.inflight for c in eligible)
    holders = [c for c in eligible if key is not None and policy.holds(c.id, key)]
    if holders:
        # A holder with room wins however loaded, and the least loaded holder.
        assert picked in holders and picked.inflight == min(c.inflight for c in holders)
    else:
        assert picked.inflight == least  # the fallback: least load
    if key is not None:
        assert picked.id in policy.holders(key)  # remembered where it went


def test_a_reported_model_draws_its_requests_and_an_unknown_one_goes_least_loaded() -> None:
    replicas = [_C(1, inflight=0), _C(2, inflight=3)]
    policy = ModelAffinity(reported={2: frozenset({"m1"})})
    assert policy.choose(replicas, 10, key="m1") is replicas[1]
    assert policy.choose(replicas, 10, key=b"m1") is replicas[1]  # the header's bytes
    assert policy.choose(replicas, 10, key="m2") is replicas[0]
    replicas[1].inflight = 10  # full: the least loaded takes it, and now holds it too
    assert policy.choose(replicas, 10, key="m1") is replicas[0]
    assert policy.holders("m1") == [1, 2]
    assert model_id_of(b"") is None and model_id_of("") is None and model_id_of(None) is None


def _table(multiplexed: bool, models: dict[int, frozenset[str]]) -> RouteTable:
    routes = tuple(ReplicaRoute(i, 1, "127.0.0.1", 9000 + i, models=models.get(i)) for i in (1, 2))
    return RouteTable("e", 1, "least_load", 10, -1, routes, multiplexed=multiplexed)


def test_the_load_balancer_reads_the_header_only_for_a_multiplexed_service() -> None:
    plain = Balancer(_table(False, {}))
    assert plain.read_key is None  # no header lookup per request

    balancer = Balancer(_table(True, {2: frozenset({"m1"})}))
    assert balancer.read_key is not None
    key = balancer.read_key(HEAD, b"")
    for _ in range(5):
        replica = balancer.choose(None, key=key)
        assert replica is not None and replica.id == 2
    # A newer report moves the model: the table's models are the policy's.
    balancer.apply(_table(True, {1: frozenset({"m1"})}))
    balancer.known[2].inflight = 10  # replica 2 full: only 1 (which reports m1) is eligible
    replica = balancer.choose(None, key=key)
    assert replica is not None and replica.id == 1
    # No longer multiplexed: back to the plain policy, the header unread.
    balancer.apply(_table(False, {}))
    assert balancer.read_key is None and not isinstance(balancer.policy, ModelAffinity)


def test_the_controller_reads_each_replica_once_then_only_the_multiplexed_ones() -> None:
    changes: list[int] = []
    reports = ModelReports(lambda: changes.append(1))
    assert reports.wanted(1) and reports.wanted(2)
    reports.seen(1, {"multiplexed_model_ids": []})
    reports.seen(2, {"kind": "class"})  # not multiplexed
    assert reports.wanted(1) and not reports.wanted(2)
    assert reports.models == {1: frozenset()} and len(changes) == 1
    reports.seen(1, {"multiplexed_model_ids": []})
    assert len(changes) == 1  # unchanged: the table is not republished
    reports.seen(1, {"multiplexed_model_ids": ["a", 7]})
    assert reports.models == {1: frozenset({"a"})} and len(changes) == 2
    reports.keep({2})  # replica 1 left
    assert reports.models == {} and reports.wanted(1)


def test_the_route_table_carries_each_replicas_models_and_the_flag() -> None:
    spec = parse_service({"run": "x", "service": {"replicas": 2}}, base_dir=Path("/x"))
    rows = [ReplicaRow("s", i, 1, ReplicaStatus.READY, 0.0, port=9000 + i) for i in (1, 2)]
    plain = route_table(spec, rows, frozenset({1, 2}), hold_at_zero=False)
    assert not plain.multiplexed and all(r.models is None for r in plain.replicas)
    table = route_table(
        spec, rows, frozenset({1, 2}), hold_at_zero=False, models={2: frozenset({"m1"})}
    )
    assert table.multiplexed
    assert [r.models for r in table.replicas] == [None, frozenset({"m1"})]
    # A replica not routable takes its models out of the table with it.
    alone = route_table(spec, rows, frozenset({1}), hold_at_zero=False, models={2: frozenset()})
    assert not alone.multiplexed
