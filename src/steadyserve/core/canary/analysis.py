"""Judging a canary against the stable version, from the load balancer's counts.

The load balancers count, per version, the requests they answered, the failures
among them (a replica's 5xx, the 502 the load balancer answers when a replica's
connection fails, and a response the replica broke off mid-stream, which went
out as a 200), a latency histogram and a time-to-first-byte histogram; the controller receives
those cumulative counts twice a second. :class:`Window` keeps timestamped
snapshots and gives the difference over the last ``interval_s`` seconds, so
every verdict is about recent traffic only, and both versions are measured over
the same window: a canary is judged against the baseline (``max_error_rate_increase``,
``max_p99_ratio``) as well as against absolute limits.

``failure_limit`` failed checks in a row abort the canary; a check with fewer
than ``min_requests`` canary requests is inconclusive and changes no count.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Counts:
    """One version's counts (cumulative in a snapshot, a difference in a window)."""

    requests: float = 0.0
    failures: float = 0.0
    buckets: tuple[float, ...] = ()
    """Non-cumulative histogram counts, one per bound and a last one for +Inf."""
    ttfb: tuple[float, ...] = ()
    """The time-to-first-byte histogram, the same way (its own bounds)."""

    def minus(self, earlier: Counts) -> Counts:
        return Counts(
            max(0.0, self.requests - earlier.requests),
            max(0.0, self.failures - earlier.failures),
            _minus(self.buckets, earlier.buckets),
            _minus(self.ttfb, earlier.ttfb),
        )

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


def _minus(later: tuple[float, ...], earlier: tuple[float, ...]) -> tuple[float, ...]:
    if not earlier:
        return later
    return tuple(max(0.0, a - b) for a, b in zip(later, earlier, strict=False))


def p99_ms(counts: Counts, bounds: Sequence[float]) -> float | None:
    """The 99th percentile latency in ms: the upper bound of the bucket that holds it
    (a conservative figure: never below the true value's bucket)."""
    return _p99_ms(counts.buckets, bounds)


def _p99_ms(buckets: Sequence[float], bounds: Sequence[float]) -> float | None:
    total = sum(buckets)
    if total <= 0:
        return None
    rank = 0.99 * total
    seen = 0.0
    for i, n in enumerate(buckets):
        seen += n
        if seen >= rank:
            return (bounds[i] if i < len(bounds) else bounds[-1] * 2) * 1000.0
    return bounds[-1] * 2000.0


@dataclass(frozen=True)
class Thresholds:
    """``service.canary.analysis``: an unset limit is not checked."""

    max_error_rate: float | None = None
    max_p99_latency_ms: float | None = None
    max_error_rate_increase: float | None = None
    max_p99_ratio: float | None = None
    max_p99_ttfb_ms: float | None = None
    min_requests: int = 100
    interval_s: float = 10.0
    failure_limit: int = 1

    @property
    def checks_anything(self) -> bool:
        return any(
            v is not None
            for v in (
                self.max_error_rate,
                self.max_p99_latency_ms,
                self.max_error_rate_increase,
                self.max_p99_ratio,
                self.max_p99_ttfb_ms,
            )
        )


@dataclass(frozen=True)
class Verdict:
    """One analysis result: passed, failed or inconclusive, with the figures."""

    outcome: str  # "passed", "failed", "inconclusive"
    reason: str
    canary: Counts
    stable: Counts

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"


def judge(
    canary: Counts,
    stable: Counts,
    limits: Thresholds,
    bounds: Sequence[float],
    ttfb_bounds: Sequence[float] = (),
) -> Verdict:
    """Compare one window's canary counts with the limits and with the stable version's."""
    if canary.requests < max(1, limits.min_requests):
        why = f"{canary.requests:g} canary requests in the window, {limits.min_requests} needed"
        return Verdict("inconclusive", why, canary, stable)
    rate, base_rate = canary.error_rate, stable.error_rate
    p99, base_p99 = p99_ms(canary, bounds), p99_ms(stable, bounds)
    figures = (
        f"error rate {rate:.1%} (stable {base_rate:.1%}), p99 "
        + (f"{p99:g} ms" if p99 is not None else "n/a")
        + (f" (stable {base_p99:g} ms)" if base_p99 is not None else "")
    )
    problems = []
    if limits.max_error_rate is not None and rate > limits.max_error_rate:
        problems.append(f"error rate {rate:.1%} > max_error_rate {limits.max_error_rate:.1%}")
    increase = limits.max_error_rate_increase
    if increase is not None and stable.requests > 0 and rate - base_rate > increase:
        problems.append(
            f"error rate {rate:.1%} exceeds stable {base_rate:.1%} by more than "
            f"max_error_rate_increase {increase:.1%}"
        )
    top = limits.max_p99_latency_ms
    if top is not None and p99 is not None and p99 > top:
        problems.append(f"p99 {p99:g} ms > max_p99_latency_ms {top:g}")
    ratio = limits.max_p99_ratio
    if ratio is not None and p99 is not None and base_p99 and p99 > base_p99 * ratio:
        problems.append(f"p99 {p99:g} ms > {ratio:g} x stable p99 {base_p99:g} ms (max_p99_ratio)")
    first = limits.max_p99_ttfb_ms
    ttfb = _p99_ms(canary.ttfb, ttfb_bounds) if ttfb_bounds else None
    if first is not None and ttfb is not None and ttfb > first:
        problems.append(f"p99 time to first byte {ttfb:g} ms > max_p99_ttfb_ms {first:g}")
    if problems:
        return Verdict("failed", "; ".join(problems), canary, stable)
    if first is not None and ttfb is not None:
        figures += f", p99 time to first byte {ttfb:g} ms"
    return Verdict("passed", figures, canary, stable)


@dataclass
class Window:
    """Timestamped cumulative snapshots per version; differences over a span."""

    span: float
    snapshots: deque[tuple[float, dict[int, Counts]]] = field(default_factory=deque)

    def add(self, now: float, totals: Mapping[int, Counts]) -> None:
        self.snapshots.append((now, dict(totals)))
        # Keep one snapshot at or before the window's start, so the span is covered.
        while len(self.snapshots) > 2 and self.snapshots[1][0] <= now - self.span:
            self.snapshots.popleft()

    def covered(self, now: float) -> bool:
        """Whether the snapshots reach back a whole span (the first check waits for it)."""
        return bool(self.snapshots) and self.snapshots[0][0] <= now - self.span

    def delta(self, version: int) -> Counts:
        """What ``version`` did between the oldest and newest snapshot kept."""
        if len(self.snapshots) < 2:
            return Counts()
        first, last = self.snapshots[0][1], self.snapshots[-1][1]
        return last.get(version, Counts()).minus(first.get(version, Counts()))


@dataclass
class Analysis:
    """The running analysis of one canary: the window and the failed checks in a row."""

    limits: Thresholds
    bounds: tuple[float, ...]
    ttfb_bounds: tuple[float, ...] = ()
    window: Window = field(init=False)
    failures_in_row: int = 0
    last_check: float | None = None

    def __post_init__(self) -> None:
        self.window = Window(span=self.limits.interval_s)

    def observe(self, now: float, totals: Mapping[int, Counts]) -> None:
        self.window.add(now, totals)

    def check(self, now: float, canary: int, stable: int) -> Verdict | None:
        """A verdict once per ``interval_s`` (None between checks or before a full window)."""
        if not self.limits.checks_anything or not self.window.covered(now):
            return None
        if self.last_check is not None and now - self.last_check < self.limits.interval_s:
            return None
        self.last_check = now
        verdict = judge(
            self.window.delta(canary),
            self.window.delta(stable),
            self.limits,
            self.bounds,
            self.ttfb_bounds,
        )
        if verdict.outcome == "failed":
            self.failures_in_row += 1
            if self.failures_in_row < self.limits.failure_limit:
                return Verdict(
                    "warning",
                    f"{verdict.reason} ({self.failures_in_row} of "
                    f"failure_limit {self.limits.failure_limit})",
                    verdict.canary,
                    verdict.stable,
                )
        elif verdict.outcome == "passed":
            self.failures_in_row = 0
        return verdict
