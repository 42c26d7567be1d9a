"""Canary weights in the balancer: an exact share between version pools, each pool
balanced by the policy, pinning with X-Steady-Version, and the table's field."""

from __future__ import annotations

from collections import Counter

import pytest

from steadyserve.lb.balancer import Balancer
from steadyserve.wire.routes import ReplicaRoute, RouteTable


def table(
    replicas: dict[int, int], weights: dict[int, int] | None = None, policy: str = "least_load"
) -> RouteTable:
    """``replicas``: id -> version."""
    return RouteTable(
        "e",
        1,
        policy,
        100,
        -1,
        tuple(ReplicaRoute(i, v, "127.0.0.1", 9000 + i) for i, v in sorted(replicas.items())),
        weights=tuple(sorted((weights or {}).items())),
    )


def shares(b: Balancer, n: int, pin: int | None = None) -> Counter[int]:
    seen: Counter[int] = Counter()
    for _ in range(n):
        r = b.choose(None, pin)
        assert r is not None
        seen[r.version] += 1
        b.release(r)
    return seen


@pytest.mark.parametrize("policy", ["least_load", "round_robin", "power_of_two"])
def test_share_is_the_weight_whatever_the_replica_counts(policy: str) -> None:
    # One canary replica against four stable ones: still exactly 20% to the canary.
    b = Balancer(table({1: 1, 2: 1, 3: 1, 4: 1, 5: 2}, {1: 80, 2: 20}, policy))
    seen = shares(b, 1000)
    assert seen == Counter({1: 800, 2: 200})


def test_each_pool_is_balanced_by_the_policy() -> None:
    b = Balancer(table({1: 1, 2: 1, 3: 2, 4: 2}, {1: 50, 2: 50}, "round_robin"))
    ids: Counter[int] = Counter()
    for _ in range(400):
        r = b.choose(None)
        assert r is not None
        ids[r.id] += 1
        b.release(r)
    assert ids == Counter({1: 100, 2: 100, 3: 100, 4: 100})


def test_weight_zero_gets_nothing_and_an_empty_pool_is_skipped() -> None:
    b = Balancer(table({1: 1, 2: 2}, {1: 100, 2: 0}))
    assert shares(b, 100) == Counter({1: 100})
    b.apply(table({1: 1}, {1: 90, 2: 10}))  # the canary has no READY replica yet
    assert shares(b, 50) == Counter({1: 50})


def test_share_stays_exact_across_tables_with_the_same_weights() -> None:
    b = Balancer(table({1: 1, 2: 2}, {1: 70, 2: 30}))
    seen = shares(b, 5)
    b.apply(table({1: 1, 3: 1, 2: 2}, {1: 70, 2: 30}))
    seen += shares(b, 95)
    assert seen == Counter({1: 70, 2: 30})


def test_a_full_pool_hands_over_rather_than_holding() -> None:
    t = RouteTable(
        "e",
        1,
        "least_load",
        1,
        -1,
        (ReplicaRoute(1, 1, "h", 1), ReplicaRoute(2, 2, "h", 2)),
        weights=((1, 50), (2, 50)),
    )
    b = Balancer(t)
    a, c = b.choose(None), b.choose(None)
    assert a is not None and c is not None and {a.version, c.version} == {1, 2}
    assert b.choose(None) is None and b.has_candidate(None)


def test_pin_picks_only_that_version_even_at_weight_zero() -> None:
    b = Balancer(table({1: 1, 2: 1, 3: 2}, {1: 100, 2: 0}))
    assert shares(b, 20, pin=2) == Counter({2: 20})
    assert b.choose(None, 7) is None and not b.has_candidate(None, 7)
    plain = Balancer(table({1: 1, 2: 2}))  # no weights: pins still work
    assert shares(plain, 10, pin=1) == Counter({1: 10})
    assert shares(plain, 10) == Counter({1: 5, 2: 5})


def test_table_weights_field_is_validated() -> None:
    base = {
        "epoch": "e",
        "version": 1,
        "policy": "least_load",
        "max_ongoing_requests": 1,
        "max_queued_requests": -1,
        "replicas": [],
    }
    assert RouteTable.from_json(base).weights == ()
    assert RouteTable.from_json({**base, "weights": {"2": 10, "1": 90}}).weights == (
        (1, 90),
        (2, 10),
    )
    for bad in ({"x": 1}, {"1": 101}, {"1": True}, [1]):
        with pytest.raises(ValueError, match="weights"):
            RouteTable.from_json({**base, "weights": bad})


def test_table_preview_field_is_validated() -> None:
    base = {
        "epoch": "e",
        "version": 1,
        "policy": "least_load",
        "max_ongoing_requests": 1,
        "max_queued_requests": -1,
        "replicas": [],
    }
    assert RouteTable.from_json(base).preview is None
    table = RouteTable.from_json({**base, "preview": {"port": 31000, "version": 2}})
    assert table.preview == (31000, 2)
    for bad in ({"port": 0, "version": 2}, {"port": 31000}, [31000, 2]):
        with pytest.raises(ValueError, match="preview"):
            RouteTable.from_json({**base, "preview": bad})
