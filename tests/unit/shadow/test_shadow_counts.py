"""A shadow step's counts add up over every load-balancer worker and across a worker's
restart (controller/routes.py, wire/counts.py), and what ``steady status`` prints of them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.cli.progressive import canary_lines
from steadyserve.controller.metrics import EntryCounts
from steadyserve.controller.routes import RoutePublisher
from steadyserve.core.shadow.verdict import Tally
from steadyserve.lb.mirror import ShadowCounts
from steadyserve.wire.counts import merge_counts


def worker_counts(compared: int, dropped: int, removed: int, noise: int) -> dict[str, Any]:
    counts = ShadowCounts()
    for i in range(compared):
        keys = frozenset({"removed $.total"}) if i < removed else frozenset()
        counts.compared_one(keys, f"GET /{i}")
    for _ in range(noise):
        counts.noise_one(frozenset({"changed $.at"}))
    counts.mirrored = compared
    counts.dropped = dropped
    return {"requests": {}, "shadow": {"2": counts.to_json()}}


one_worker = st.tuples(
    st.integers(0, 50), st.integers(0, 5), st.integers(0, 50), st.integers(0, 10)
).map(lambda t: (t[0], t[1], min(t[2], t[0]), t[3]))


@given(st.lists(one_worker, min_size=1, max_size=4))
def test_every_workers_counts_add_up(workers: list[tuple[int, int, int, int]]) -> None:
    pub = RoutePublisher("e", lambda: 100.0)
    pub.publish({"replicas": []})
    merged: dict[str, Any] = {}
    for i, figures in enumerate(workers):
        raw = {"worker": f"w{i}", "metrics": worker_counts(*figures)}
        _, _, _, merged = pub.report(pub.token, {}, {}, 0, raw)
    tally = Tally.from_json(merged["metrics"]["shadow"]["2"])
    assert tally.compared == sum(w[0] for w in workers)
    assert tally.dropped == sum(w[1] for w in workers)
    assert tally.signatures.get("removed $.total", 0) == sum(w[2] for w in workers)
    assert tally.signatures.get("", 0) == sum(w[0] - w[2] for w in workers)
    assert tally.noise_pairs == sum(w[3] for w in workers)


def test_a_restarted_worker_keeps_what_it_counted_before() -> None:
    entry = EntryCounts()
    entry.ingest(11, worker_counts(30, 1, 3, 5))
    entry.ingest(12, worker_counts(10, 0, 1, 2))  # a new process counts from zero
    tally = Tally.from_json(entry.counts()["shadow"]["2"])
    assert (tally.compared, tally.dropped, tally.noise_pairs) == (40, 1, 7)
    assert tally.signatures == {"": 36, "removed $.total": 4}


def test_a_report_without_shadow_counts_gains_none() -> None:
    assert "shadow" not in merge_counts({"requests": {"1 1 GET 2": 3}}, {"requests": {}})


def test_status_prints_the_figures_and_the_top_paths() -> None:
    shadow = {
        "mirror": 50,
        "mirrored": 210,
        "dropped": 3,
        "outcome": "failed",
        "reason": "4 of 200 compared answers differ (2.00%)",
        "compared": 200,
        "differed": 4,
        "rate": 0.02,
        "top_paths": [{"key": "removed $.total", "answers": 4, "example": "GET /o?k=***"}],
        "noise": ["changed $.at"],
    }
    svc = {
        "name": "web",
        "update": {"to_version": 2},
        "canary": {"step": 1, "steps": 3, "weight": 0, "phase": "RUNNING", "shadow": shadow},
    }
    lines = canary_lines([svc])
    assert lines[1] == (
        "web: shadow 50%: 210 mirrored, 3 dropped, 200 compared, 4 differ (2.00%); "
        "failed: 4 of 200 compared answers differ (2.00%)"
    )
    assert lines[2] == "  removed $.total: 4 answers, e.g. GET /o?k=***"
    assert lines[3] == "  noise (ignored): changed $.at"


def test_prometheus_shows_the_shadow_counts() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from steadyserve.wire.exposition import ReportCollector, render

    report = worker_counts(8, 2, 3, 4)
    text = render(ReportCollector(lambda: [("web", report)])).decode()
    family = {f.name: f for f in text_string_to_metric_families(text)}["steady_lb_shadow_answers"]
    got = {s.labels["kind"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert got == {"mirrored": 8, "dropped": 2, "compared": 8, "alike": 5, "noise_pairs": 4}
