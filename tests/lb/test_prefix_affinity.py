"""prefix_affinity, exhaustively: chains, the bounded index, and the choice."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.core.routing.options import PolicyOptions
from steadyserve.core.routing.prefix import PrefixAffinity, PrefixIndex, chain
from steadyserve.core.routing.registry import make_policy


@dataclass
class R:
    id: int
    inflight: int
    version: int = 1
    capacity: float = 1.0
    accelerator: str | None = None
    queue: float | None = None


def fleet(n: int) -> list[R]:
    return [R(i + 1, 0) for i in range(n)]


@given(a=st.binary(max_size=300), b=st.binary(max_size=300), size=st.integers(1, 16))
def test_chains_agree_exactly_on_shared_whole_blocks(a: bytes, b: bytes, size: int) -> None:
    ca, cb = chain(a, size), chain(b, size)
    assert len(ca) == len(a) // size
    shared = 0
    while shared < min(len(ca), len(cb)) and ca[shared] == cb[shared]:
        shared += 1
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    assert shared == min(common // size, len(ca), len(cb))


@given(
    ops=st.lists(
        st.tuples(st.integers(1, 3), st.lists(st.integers(0, 50), max_size=20, unique=True)),
        max_size=40,
    ),
    limit=st.integers(1, 12),
)
def test_the_index_stays_within_its_limit_and_keeps_the_newest_head(
    ops: list[tuple[int, list[int]]], limit: int
) -> None:
    index = PrefixIndex(limit)
    for rid, hashes in ops:
        index.record(rid, hashes)
        assert index.size(rid) <= limit
        # The chain just sent is matched over as much of its head as fits.
        assert index.match(rid, hashes) >= min(limit, len(hashes))
    for rid in (1, 2, 3):
        index.forget(rid)
        assert index.size(rid) == 0 and index.match(rid, [1, 2]) == 0


def test_a_long_history_loses_its_tail_before_its_head() -> None:
    index = PrefixIndex(4)
    index.record(1, [10, 11, 12])
    index.record(1, [20, 21, 22])  # 3 + 3 > 4: the oldest (deepest) go first
    assert index.match(1, [20, 21, 22]) == 3
    assert index.match(1, [10, 11, 12]) == 1


def test_the_longest_match_wins_and_a_new_prompt_goes_to_the_least_loaded() -> None:
    policy = PrefixAffinity()
    rs = fleet(4)
    system = chain(b"S" * 2048, 256)
    first = policy.choose(rs, 0, key=system)
    assert first is not None
    first.inflight += 1
    for turn in range(1, 5):  # a growing history keeps its replica
        got = policy.choose(rs, 0, key=system + chain(b"T" * 256 * turn, 256))
        assert got is first
    for r in rs:
        r.inflight = 3
    rs[2].inflight = 0
    assert policy.choose(rs, 0, key=chain(b"X" * 1024, 256)) is rs[2]


@given(
    loads=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    threshold=st.integers(0, 6),
    hot=st.integers(0, 5),
)
def test_overload_beyond_the_threshold_sends_to_the_least_loaded(
    loads: list[int], threshold: int, hot: int
) -> None:
    rs = [R(i + 1, load) for i, load in enumerate(loads)]
    hot %= len(rs)
    policy = PrefixAffinity(PolicyOptions(imbalance_threshold=threshold))
    key = chain(b"P" * 1024, 256)
    policy.index.record(rs[hot].id, key)
    got = policy.choose(rs, 0, key=key)
    assert got is not None
    least = min(loads)
    if loads[hot] - least > threshold:
        assert got.inflight == least
    else:
        assert got is rs[hot]


@given(
    loads=st.lists(st.integers(0, 4), max_size=6),
    limit=st.integers(0, 4),
    exclude=st.sets(st.integers(1, 6)),
    keyed=st.booleans(),
)
def test_never_full_or_excluded_none_only_when_none_eligible(
    loads: list[int], limit: int, exclude: set[int], keyed: bool
) -> None:
    rs = [R(i + 1, load) for i, load in enumerate(loads)]
    policy = make_policy("prefix_affinity")
    key = chain(b"Q" * 512, 256) if keyed else None
    for r in rs:
        policy.choose([r], 0, key=key)  # every replica has the prefix
    ok = [r for r in rs if (limit <= 0 or r.inflight < limit) and r.id not in exclude]
    got = policy.choose(rs, limit, exclude, key)
    assert (got is None) == (not ok)
    assert got is None or got in ok


def test_requests_without_a_prompt_spread_like_least_load() -> None:
    policy = PrefixAffinity()
    rs = fleet(3)
    picks = [policy.choose(rs, 0, key=None) for _ in range(6)]
    assert {p.id for p in picks if p is not None} == {1, 2, 3}
    assert policy.index.entries == {}


def test_a_fresh_scrape_replaces_the_in_flight_count() -> None:
    rs = [R(1, 0, queue=9.0), R(2, 5)]
    assert PrefixAffinity().choose(rs, 0, key=None) is rs[1]


def test_a_replica_that_left_is_forgotten() -> None:
    policy = PrefixAffinity()
    rs = fleet(2)
    key = chain(b"Z" * 512, 256)
    owner = policy.choose(rs, 0, key=key)
    assert owner is not None
    policy.forget(owner.id)
    assert policy.index.size(owner.id) == 0


@given(
    steps=st.lists(
        st.tuples(st.lists(st.integers(0, 5), min_size=4, max_size=4), st.sets(st.integers(1, 4))),
        min_size=1,
        max_size=30,
    ),
    limit=st.integers(0, 5),
)
def test_prompts_that_match_nowhere_are_routed_exactly_as_least_load(
    steps: list[tuple[list[int], set[int]]], limit: int
) -> None:
    """Uniform prompts cost nothing in balance: the same replica, call after call."""
    affinity, least = PrefixAffinity(), make_policy("least_load")
    for n, (loads, exclude) in enumerate(steps):
        rs = [R(i + 1, load) for i, load in enumerate(loads)]
        key = chain((b"%04d" % n) * 300, 256)  # a new prompt every time
        a, b = affinity.choose(rs, limit, exclude, key), least.choose(rs, limit, exclude)
        assert (a.id if a else None) == (b.id if b else None)
