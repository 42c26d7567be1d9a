"""Scale-down's choice of replicas: never a busy one while an idle one of the same
standing stays (a stopping replica drains its streams first, so it would linger),
and never a READY one while a not-ready one stays."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.core.autoscale.victims import Candidate, choose_victims

candidates = st.lists(
    st.builds(
        Candidate,
        replica_id=st.integers(1, 10_000),
        ready=st.booleans(),
        launched_at=st.floats(0, 1000),
        capacity=st.sampled_from([0.0, 10.0, 15.0]),
        in_flight=st.integers(0, 5),
    ),
    max_size=12,
    unique_by=lambda c: c.replica_id,
)


@given(candidates, st.integers(0, 12))
def test_no_busier_replica_goes_while_an_idler_one_of_its_standing_stays(
    pool: list[Candidate], count: int
) -> None:
    chosen = set(choose_victims(pool, count))
    assert len(chosen) == min(max(count, 0), len(pool))
    gone = [c for c in pool if c.replica_id in chosen]
    kept = [c for c in pool if c.replica_id not in chosen]
    for g in gone:
        for k in kept:
            assert not (g.ready and not k.ready), (g, k)
            if (g.ready, g.capacity) == (k.ready, k.capacity):
                assert g.in_flight <= k.in_flight, (g, k)


def test_the_issue_case_the_newest_holds_the_streams() -> None:
    """least_load sent the new long streams to the newest replica: the older idle one goes."""
    pool = [
        Candidate(1, True, 100.0, in_flight=0),
        Candidate(2, True, 200.0, in_flight=0),
        Candidate(3, True, 300.0, in_flight=2),
    ]
    assert choose_victims(pool, 1) == [2]
    assert choose_victims(pool, 2) == [2, 1]
