"""Draining with several load-balancer workers (controller/routes.py), in simulated time.

A replica may stop only once every live worker has acknowledged a table without
it and reports nothing in flight for it; a worker that went silent (died) stops
holding draining up after WORKER_STALE_S.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller.routes import WORKER_STALE_S, RoutePublisher


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def table(*ids: int) -> dict[str, Any]:
    return {"replicas": [{"id": i} for i in ids]}


def worker_report(pub: RoutePublisher, worker: str, inflight: dict[int, int]) -> None:
    pub.report(pub.token, inflight, dict.fromkeys(inflight, 1), 0, {"worker": worker})


def test_drains_only_after_every_worker_acknowledged() -> None:
    clock = Clock()
    pub = RoutePublisher("e", clock)
    pub.publish(table(1, 2))
    for w in ("a", "b"):
        pub.acknowledge(pub.token, w)
        worker_report(pub, w, {1: 0, 2: 3})
    pub.publish(table(1))  # replica 2 leaves
    removed_in = pub.version
    pub.acknowledge(pub.token, "a")
    worker_report(pub, "a", {1: 0, 2: 0})
    assert not pub.drained(2, removed_in), "worker b still routes by the old table"
    pub.acknowledge(pub.token, "b")
    worker_report(pub, "b", {1: 0, 2: 1})
    assert not pub.drained(2, removed_in), "worker b still has a request on replica 2"
    worker_report(pub, "b", {1: 0, 2: 0})
    assert pub.drained(2, removed_in)


def test_a_silent_worker_stops_holding_draining_up() -> None:
    clock = Clock()
    pub = RoutePublisher("e", clock)
    pub.publish(table(1, 2))
    for w in ("a", "b"):
        pub.acknowledge(pub.token, w)
        worker_report(pub, w, {2: 1})
    pub.publish(table(1))
    pub.acknowledge(pub.token, "a")
    worker_report(pub, "a", {2: 0})
    clock.now += WORKER_STALE_S / 2
    worker_report(pub, "a", {2: 0})
    assert not pub.drained(2, pub.version)
    clock.now += WORKER_STALE_S / 2 + 0.1  # b: silent for longer than WORKER_STALE_S
    worker_report(pub, "a", {2: 0})
    assert pub.drained(2, pub.version)


def test_nothing_is_drained_before_any_worker_was_heard() -> None:
    pub = RoutePublisher("e", Clock())
    pub.publish(table(1))
    assert not pub.drained(1, pub.version)


@given(st.lists(st.dictionaries(st.integers(1, 5), st.integers(0, 50)), min_size=1, max_size=6))
def test_the_service_report_sums_the_live_workers(counts: list[dict[int, int]]) -> None:
    pub = RoutePublisher("e", Clock())
    pub.publish(table(1))
    for i, inflight in enumerate(counts):
        raw = {"worker": str(i), "metrics": {"inflight_total": sum(inflight.values())}}
        total, _, queued, merged = pub.report(pub.token, inflight, {}, 1, raw)
    expected: dict[int, int] = {}
    for inflight in counts:
        for rid, n in inflight.items():
            expected[rid] = expected.get(rid, 0) + n
    assert total == expected
    assert queued == len(counts)
    assert merged["metrics"]["inflight_total"] == sum(expected.values())
