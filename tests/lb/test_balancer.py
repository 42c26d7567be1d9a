"""The balancer's bookkeeping: tables, slots, ejection, the report snapshot."""

from __future__ import annotations

from typing import Any, cast

from steadyserve.lb.balancer import Balancer
from steadyserve.wire.routes import ReplicaRoute, RouteTable


class FakeConn:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def table(
    *ids: int, version: int = 1, policy: str = "least_load", max_ongoing: int = 2
) -> RouteTable:
    return RouteTable(
        "e",
        version,
        policy,
        max_ongoing,
        -1,
        tuple(ReplicaRoute(i, 1, "127.0.0.1", 9000 + i) for i in ids),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_slots_and_limits() -> None:
    b = Balancer(table(1, 2, max_ongoing=1))
    first, second = b.choose(None), b.choose(None)
    assert first is not None and second is not None and first is not second
    assert b.choose(None) is None  # both full
    assert b.has_candidate(None)  # ... but worth waiting for
    b.release(first)
    assert b.choose(None) is first


def test_leaving_replica_keeps_inflight_and_loses_idle_connections() -> None:
    b = Balancer(table(1, 2))
    r1 = b.known[1]
    busy = b.choose({2})
    assert busy is r1
    idle = FakeConn()
    r1.idle.append(cast(Any, idle))
    b.apply(table(2, version=2))
    assert idle.closed
    assert [r.id for r in b.replicas] == [2]
    assert b.snapshot()["inflight"] == {"1": 1, "2": 0}
    b.release(r1)
    assert b.snapshot() == {
        "table": "e:2",
        "inflight": {"2": 0},
        "requests": {"2": 0},
        "errors": {"2": 0},
    }


def test_table_sets_policy_and_limits() -> None:
    b = Balancer(table(1))
    b.apply(table(1, version=2, policy="power_of_two", max_ongoing=9))
    assert b.policy.name == "power_of_two" and b.max_ongoing == 9


def test_ejection_lasts_about_a_second() -> None:
    clock = Clock()
    b = Balancer(table(1, 2), clock=clock)
    r1 = b.known[1]
    b.eject(r1)
    for _ in range(3):
        chosen = b.choose(None)
        assert chosen is b.known[2]
        b.release(chosen)
    assert not b.has_candidate({2})  # only the ejected one is left
    clock.now += 1.01
    assert b.has_candidate({2})
    assert b.choose({2}) is r1


def test_no_table_no_candidate() -> None:
    b = Balancer(None)
    assert b.choose(None) is None and not b.has_candidate(None)
    assert b.snapshot()["table"] == ""
