"""Shared in-flight counts between LB workers (lb/shared_load.py), two workers in one process.

Each worker's balancer sees only its own requests; with the shared counts its
policy decides on the endpoint's: least-load avoids a replica another worker
loaded, and max_ongoing_requests caps a replica across the workers.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.lb import shared_load
from steadyserve.lb.balancer import Balancer
from steadyserve.lb.shared_load import SharedLoad, refresh, share
from steadyserve.wire.routes import RouteTable

ROUTES = "127.0.0.1:1,127.0.0.1:2"


def workers(count: int, max_ongoing: int = 100) -> list[Balancer]:
    fd = shared_load.create(count)
    try:
        balancers = []
        for index in range(count):
            balancer = Balancer(RouteTable.static(ROUTES, "least_load", max_ongoing, -1))
            share(balancer, SharedLoad(fd, count, index))
            balancers.append(balancer)
        return balancers
    finally:
        os.close(fd)  # the maps stay valid


def test_least_load_sees_the_other_workers_requests() -> None:
    a, b = workers(2)
    held = [a.choose(None) for _ in range(3)]
    assert [r.id for r in held if r is not None] in ([1, 2, 1], [2, 1, 2])
    busier = 1 if sum(r.id == 1 for r in held if r) == 2 else 2
    chosen = b.choose(None)
    assert chosen is not None and chosen.id != busier


def test_max_ongoing_caps_a_replica_across_workers() -> None:
    a, b = workers(2, max_ongoing=1)
    first, second = a.choose(None), b.choose(None)
    assert first is not None and second is not None and first.id != second.id
    assert a.choose(None) is None and b.choose(None) is None  # both replicas full
    assert first is not None
    a.release(first)
    assert b.choose(None) is None  # not published yet: a moment late, never early
    refresh(a, a.policy.shared)  # type: ignore[attr-defined]
    again = b.choose(None)
    assert again is not None and again.id == first.id


def endpoint_counts(balancers: list[Balancer]) -> dict[int, int]:
    """Each replica's requests in flight across every worker."""
    totals = {1: 0, 2: 0}
    for owner in balancers:
        for state in owner.known.values():
            totals[state.id] += state.inflight
    return totals


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=200))
def test_shares_stay_even_whichever_worker_gets_the_requests(
    steps: list[tuple[int, bool]],
) -> None:
    """Requests arrive at any worker and some finish (each release published):
    every choice goes to a replica with the fewest requests endpoint-wide, so
    counts within one of each other stay so. (Releases alone may unbalance them,
    e.g. the oldest requests all on one replica: then choices even them out,
    one at a time, and no policy could do more.)"""
    balancers = workers(4)
    held: list[tuple[Balancer, object]] = []
    for index, finish in steps:
        if finish and held:
            owner, replica = held.pop(0)
            owner.release(replica)  # type: ignore[arg-type]
            refresh(owner, owner.policy.shared)  # type: ignore[attr-defined]
            continue
        before = endpoint_counts(balancers)
        balancer = balancers[index]
        replica = balancer.choose(None)
        assert replica is not None
        held.append((balancer, replica))
        assert before[replica.id] == min(before.values()), (before, replica.id)
        after = endpoint_counts(balancers)
        if abs(before[1] - before[2]) <= 1:
            assert abs(after[1] - after[2]) <= 1, after
