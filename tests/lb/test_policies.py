"""Routing policies, exhaustively: they are pure, so hypothesis drives them directly."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.core.routing.policies import LeastLoad, PowerOfTwo, RoundRobin, least_loaded
from steadyserve.core.routing.registry import make_policy


@dataclass
class R:
    id: int
    inflight: int


loads = st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=8)
limits = st.integers(min_value=0, max_value=6)  # 0: no limit
POLICY_NAMES = ["least_load", "round_robin", "power_of_two"]


def replicas(ls: list[int]) -> list[R]:
    return [R(i + 1, load) for i, load in enumerate(ls)]


def eligible(rs: list[R], limit: int, exclude: set[int]) -> list[R]:
    return [r for r in rs if (limit <= 0 or r.inflight < limit) and r.id not in exclude]


@pytest.mark.parametrize("name", POLICY_NAMES)
@given(
    ls=loads,
    limit=limits,
    exclude=st.sets(st.integers(1, 8)),
    calls=st.integers(1, 5),
    seed=st.integers(0, 2**32),
)
def test_never_picks_excluded_or_full_and_none_only_when_none_eligible(
    name: str, ls: list[int], limit: int, exclude: set[int], calls: int, seed: int
) -> None:
    policy = make_policy(name, random.Random(seed))
    rs = replicas(ls)
    ok = eligible(rs, limit, exclude)
    for _ in range(calls):  # state (rotation, rng) must not break the guarantees
        chosen = policy.choose(rs, limit, exclude)
        if ok:
            assert chosen is not None and chosen in ok
        else:
            assert chosen is None


@given(ls=loads, limit=limits, exclude=st.sets(st.integers(1, 8)), rotations=st.integers(0, 9))
def test_least_load_picks_a_minimum(
    ls: list[int], limit: int, exclude: set[int], rotations: int
) -> None:
    policy = LeastLoad()
    rs = replicas(ls)
    for _ in range(rotations):
        policy.choose(rs, limit)
    ok = eligible(rs, limit, exclude)
    chosen = policy.choose(rs, limit, exclude)
    if ok:
        assert chosen is not None
        assert chosen.inflight == min(r.inflight for r in ok)


@pytest.mark.parametrize("name", ["least_load", "round_robin"])
@given(n=st.integers(1, 8), load=st.integers(0, 3))
def test_sequential_picks_with_equal_load_cover_all_replicas(name: str, n: int, load: int) -> None:
    policy = make_policy(name)
    rs = [R(i + 1, load) for i in range(n)]
    picked = [policy.choose(rs, 0) for _ in range(n)]
    assert {p.id for p in picked if p is not None} == {r.id for r in rs}


def test_least_load_spreads_sequential_requests_as_they_complete() -> None:
    """Sequential traffic: every request finishes before the next, loads stay 0."""
    policy = LeastLoad()
    rs = replicas([0, 0, 0])
    counts = Counter(policy.choose(rs, 10).id for _ in range(300))  # type: ignore[union-attr]
    assert counts == {1: 100, 2: 100, 3: 100}


@given(n=st.integers(1, 8), rounds=st.integers(1, 10), exclude=st.sets(st.integers(1, 8)))
def test_round_robin_is_fair(n: int, rounds: int, exclude: set[int]) -> None:
    policy = RoundRobin()
    rs = replicas([0] * n)
    ok = eligible(rs, 0, exclude)
    counts = Counter(
        policy.choose(rs, 0, exclude).id  # type: ignore[union-attr]
        for _ in range(rounds * len(ok))
    )
    assert all(counts[r.id] == rounds for r in ok)
    assert set(counts) == {r.id for r in ok}


@given(ls=st.lists(st.integers(0, 6), min_size=2, max_size=8), seed=st.integers(0, 2**32))
def test_power_of_two_never_picks_the_strictly_busiest_of_its_pair(
    ls: list[int], seed: int
) -> None:
    rs = replicas(ls)
    policy = PowerOfTwo(random.Random(seed))
    chosen = policy.choose(rs, 0)
    assert chosen is not None
    # Two distinct candidates were compared, so the global maximum can only win a tie.
    busiest = max(r.inflight for r in rs)
    if chosen.inflight == busiest:
        assert sum(1 for r in rs if r.inflight == busiest) >= 2 or len(set(ls)) == 1


def test_power_of_two_is_deterministic_with_a_seeded_rng() -> None:
    rs = replicas([1, 2, 3, 4, 5])
    a = [PowerOfTwo(random.Random(7)).choose(rs, 0) for _ in range(5)]
    b = [PowerOfTwo(random.Random(7)).choose(rs, 0) for _ in range(5)]
    assert a == b


def test_unknown_policy_names_the_choices() -> None:
    with pytest.raises(ValueError, match="least_load"):
        make_policy("fastest")


@dataclass
class Loaded:
    id: int
    inflight: int
    load: float


@given(
    loads=st.lists(st.integers(-3, 6), max_size=8),
    inflight=st.lists(st.integers(0, 4), min_size=8, max_size=8),
    limit=limits,
    exclude=st.sets(st.integers(1, 8)),
    start=st.integers(0, 20),
)
def test_the_one_least_load_scan_is_the_first_minimum_from_its_start(
    loads: list[int], inflight: list[int], limit: int, exclude: set[int], start: int
) -> None:
    """Every least-load policy scans with least_loaded: the eligible replica of least
    load, ties to the first from ``start``; stopping at the floor changes nothing
    when no load is below it, and a negative load (a replica's own report) is found."""
    rs = [Loaded(i + 1, inflight[i], float(load)) for i, load in enumerate(loads)]
    n = len(rs)
    order = [rs[(start + i) % n] for i in range(n)]
    ok = [r for r in order if r.id not in exclude and (limit <= 0 or r.inflight < limit)]
    expected = min(ok, key=lambda r: r.load) if ok else None  # min keeps the first
    assert least_loaded(rs, start, lambda r: r.load, limit, exclude, floor=None) is expected
    if all(r.load >= 0 for r in rs):
        assert least_loaded(rs, start, lambda r: r.load, limit, exclude) is expected
