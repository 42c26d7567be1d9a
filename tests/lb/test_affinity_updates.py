"""Request-aware policies through the balancer's table changes: a replica that
leaves is forgotten, and a canary's weights hold for a hot prompt too."""

from __future__ import annotations

from collections import Counter

from steadyserve.core.routing.prefix import PrefixAffinity, chain
from steadyserve.lb.balancer import Balancer
from steadyserve.wire.routes import ReplicaRoute, RouteTable


def table(ids: list[tuple[int, int]], weights: tuple[tuple[int, int], ...] = ()) -> RouteTable:
    routes = tuple(ReplicaRoute(rid, version, "127.0.0.1", 9000 + rid) for rid, version in ids)
    return RouteTable("e", 1, "prefix_affinity", 100, -1, routes, weights=weights)


HOT = chain(b"a long shared system prompt " * 100, 256)


def test_a_replica_that_leaves_the_table_loses_its_prefixes_and_they_move() -> None:
    balancer = Balancer(table([(1, 1), (2, 1), (3, 1)]), "prefix_affinity")
    owner = balancer.choose(None, key=HOT)
    assert owner is not None
    balancer.release(owner)
    policy = balancer.policy
    assert isinstance(policy, PrefixAffinity) and policy.index.size(owner.id) > 0
    balancer.apply(table([(r, 1) for r in (1, 2, 3) if r != owner.id]))  # drained
    assert policy.index.size(owner.id) == 0
    moved = balancer.choose(None, key=HOT)
    assert moved is not None and moved.id != owner.id
    balancer.release(moved)
    again = balancer.choose(None, key=HOT)
    assert again is moved  # and sticks to its new replica


def test_a_canary_gets_its_weight_of_a_hot_prompt_not_all_of_it() -> None:
    balancer = Balancer(table([(1, 1), (2, 1), (3, 2)], weights=((1, 75), (2, 25))))
    versions: Counter[int] = Counter()
    for _ in range(400):
        replica = balancer.choose(None, key=HOT)
        assert replica is not None
        versions[replica.version] += 1
        balancer.release(replica)
    assert versions == {1: 300, 2: 100}
