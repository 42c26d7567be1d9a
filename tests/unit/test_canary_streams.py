"""Canary analysis sees what happens mid-stream: a response the replica broke off
(it went out as a 200) is an error of its version, a client leaving or a drain's
cut is not; and the p99 time to first byte (an LLM's first token) can fail a step."""

from __future__ import annotations

from steadyserve.controller.metrics import version_totals
from steadyserve.core.canary.analysis import Analysis, Counts, Thresholds, judge
from steadyserve.wire.counts import LATENCY_BUCKETS, TTFB_BUCKETS, TTFB_SLOTS


def test_a_stream_the_replica_broke_is_an_error_of_its_version() -> None:
    totals = version_totals(
        {
            "requests": {
                "2 4 POST 2 completed": 90,
                "2 4 POST 2 replica_failed": 6,
                "2 4 POST 2 timed_out": 1,
                "2 4 POST 2 client_aborted": 20,
                "2 4 POST 2 cut_by_drain": 3,
                "2 4 POST 5 completed": 2,
                "1 1 GET 2": 50,  # a key from a load balancer older than outcomes
            }
        }
    )
    assert (totals["2"].requests, totals["2"].errors) == (122, 9)
    assert (totals["1"].requests, totals["1"].errors) == (50, 0)


def _ttfb(slow: int, total: int) -> tuple[float, ...]:
    """``total`` first bytes, ``slow`` of them past 2 s (the rest within 100 ms)."""
    slots = [0.0] * (TTFB_SLOTS - 1)
    slots[TTFB_BUCKETS.index(0.1)] = total - slow
    slots[TTFB_BUCKETS.index(3.0)] = slow
    return tuple(slots)


def test_p99_time_to_first_byte_fails_a_canary_whose_first_token_is_slow() -> None:
    limits = Thresholds(max_p99_ttfb_ms=1000, min_requests=100)
    fast = Counts(200, 0, (), _ttfb(0, 200))
    slow = Counts(200, 0, (), _ttfb(10, 200))
    passed = judge(fast, fast, limits, LATENCY_BUCKETS, TTFB_BUCKETS)
    assert passed.outcome == "passed" and passed.reason.endswith("p99 time to first byte 100 ms")
    verdict = judge(slow, fast, limits, LATENCY_BUCKETS, TTFB_BUCKETS)
    assert verdict.outcome == "failed"
    assert verdict.reason == "p99 time to first byte 3000 ms > max_p99_ttfb_ms 1000"


def test_the_window_takes_differences_of_the_ttfb_histogram() -> None:
    analysis = Analysis(
        Thresholds(max_p99_ttfb_ms=1000, interval_s=10), LATENCY_BUCKETS, TTFB_BUCKETS
    )
    analysis.observe(0.0, {1: Counts(0, 0, (), _ttfb(0, 0)), 2: Counts(500, 0, (), _ttfb(50, 500))})
    # Ten seconds later the canary's first bytes in the window are all fast again.
    analysis.observe(
        10.0, {1: Counts(0, 0, (), _ttfb(0, 0)), 2: Counts(700, 0, (), _ttfb(50, 700))}
    )
    verdict = analysis.check(10.0, canary=2, stable=1)
    assert verdict is not None and verdict.outcome == "passed", verdict
