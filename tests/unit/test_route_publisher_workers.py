"""Draining with several load-balancer workers (controller/routes.py), in simulated time.

A replica may stop only once every live worker has acknowledged a table without
it and reports nothing in flight for it; a worker that went silent (died) stops
holding draining up after WORKER_STALE_S.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller.metrics import EntryCounts
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


def lb_report(pub: RoutePublisher, lb_pid: int, worker: str, served: int) -> dict[str, Any]:
    """One worker of LB process ``lb_pid`` reports ``served`` requests since it started;
    the service-wide metrics the controller takes from it."""
    raw = {"worker": worker, "lb_pid": lb_pid, "metrics": {"requests": {"1 1 GET 2": served}}}
    metrics: dict[str, Any] = pub.report(pub.token, {}, {1: served}, 0, raw)[3]["metrics"]
    return metrics


def test_a_restarted_load_balancer_is_not_counted_twice() -> None:
    """The dead process's worker lingers for WORKER_STALE_S (it may only be slow), but
    its counts are that process's: the observer folds them into its base when the
    reports' lb_pid changes, so a report of the new process must not carry them too
    (seed 1778 of the simulator: a shadow base above what was ever mirrored)."""
    clock = Clock()
    pub = RoutePublisher("e", clock)
    pub.publish(table(1))
    seen = EntryCounts()
    seen.ingest(11, lb_report(pub, 11, "11", 100))
    clock.now += 1.0  # the LB died and its new process reports, the old view still live
    seen.ingest(12, lb_report(pub, 12, "12", 3))
    assert seen.counts()["requests"] == {"1 1 GET 2": 103}
    clock.now += WORKER_STALE_S  # the dead worker is forgotten: the total stays
    seen.ingest(12, lb_report(pub, 12, "12", 5))
    assert seen.counts()["requests"] == {"1 1 GET 2": 105}


def test_the_workers_of_one_load_balancer_still_add_up() -> None:
    pub = RoutePublisher("e", Clock())
    pub.publish(table(1))
    lb_report(pub, 11, "21", 4)
    assert lb_report(pub, 11, "22", 6)["requests"] == {"1 1 GET 2": 10}


def test_a_replaced_load_balancer_draining_beside_its_successor_is_counted_once() -> None:
    """A changed ``load_balancer.workers`` starts a new LB and drains the old one, which
    reports until it ends (and once more at its end): the two processes' reports
    interleave, and each one's counters are its own since it started."""
    clock = Clock()
    pub = RoutePublisher("e", clock)
    pub.publish(table(1))
    seen = EntryCounts()
    seen.ingest(11, lb_report(pub, 11, "11", 100))
    seen.ingest(12, lb_report(pub, 12, "12", 3))  # the new LB serves
    seen.ingest(11, lb_report(pub, 11, "11", 101))  # the old one finishes a request
    assert seen.counts()["requests"] == {"1 1 GET 2": 104}
    seen.ingest(12, lb_report(pub, 12, "12", 5))
    assert seen.counts()["requests"] == {"1 1 GET 2": 106}
    clock.now += WORKER_STALE_S + 1  # the old one is gone
    seen.ingest(13, lb_report(pub, 13, "13", 2))  # and later the new one restarts
    seen.ingest(14, lb_report(pub, 14, "14", 1))  # twice
    assert seen.counts()["requests"] == {"1 1 GET 2": 109}
