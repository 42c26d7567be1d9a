"""What the controller knows about traffic and itself, for ``/metrics`` and the dashboard.

Aggregation choice: each load balancer already posts a load report to the
controller twice a second (for draining and autoscaling); its cumulative
counters ride along in that report (``report["metrics"]``), so the controller
needs no second connection per LB, no port discovery, and sees every LB's
counts at most half a second old. The LB's own loopback metrics port serves the
same counters for anyone who scrapes LBs directly.

A restarted load balancer starts counting from zero: the controller folds the
previous process's last counts into a base, so its ``steady_lb_*`` counters only
ever grow while the controller runs (a restarted controller starts a new series,
which Prometheus' ``rate()`` handles as a counter reset).

The gateway (a Ray Serve route prefix) reports its counters for each service it
serves the same way, as that service's entry "gateway": ``Traffic`` keeps each
entry's counters apart for ``/metrics`` (the ``entry`` label) and adds them up
for the dashboard's rates and canary analysis.

``Traffic.samples`` keeps 15 minutes of per-version request rate, 5xx rate and
p50/p99 latency at one sample a second, from the differences between reports:
that is what the dashboard charts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from steadyserve.core.states import ReplicaStatus, UpdateStatus
from steadyserve.wire.counts import (
    BROKEN_BY_REPLICA,
    ENDPOINT,
    LATENCY_BUCKETS,
    merge_counts,
    request_key,
)
from steadyserve.wire.exposition import families

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller

SAMPLE_S = 1.0
WINDOW_S = 15 * 60
REPORT_FRESH_S = 5.0
UPDATE_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
TICK_QUANTILES = (0.5, 0.99, 1.0)


@dataclass
class VersionTotals:
    """One version's cumulative counts, summed over replicas, methods and classes."""

    requests: float = 0.0
    errors: float = 0.0  # 5xx, and responses the replica broke off (BROKEN_BY_REPLICA)
    buckets: list[float] = field(default_factory=list)  # per bucket (+Inf last), no sum
    ttfb: list[float] = field(default_factory=list)  # time to first byte, the same way


def version_totals(counts: Mapping[str, Any]) -> dict[str, VersionTotals]:
    """Per-version totals of a report's counters (version "0": the LB answered itself).

    A stream the replica broke mid-response went out as a 200: it is an error all
    the same, or a version that crashes mid-stream would pass its canary."""
    out: dict[str, VersionTotals] = {}
    for key, n in (counts.get("requests") or {}).items():
        version, _, _, code_class, outcome = request_key(key)
        totals = out.setdefault(version, VersionTotals())
        totals.requests += n
        if code_class == "5" or outcome in BROKEN_BY_REPLICA:
            totals.errors += n
    for version, slots in (counts.get("latency") or {}).items():
        out.setdefault(version, VersionTotals()).buckets = list(slots[:-1])
    for version, slots in (counts.get("ttfb") or {}).items():
        out.setdefault(version, VersionTotals()).ttfb = list(slots[:-1])
    return out


def quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float | None:
    """The q-quantile of a (non-cumulative) bucket histogram, interpolated in its bucket."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    for i, count in enumerate(counts):
        if count > 0 and seen + count >= rank:
            low = bounds[i - 1] if 0 < i <= len(bounds) else 0.0
            high = bounds[i] if i < len(bounds) else bounds[-1]
            return low + (high - low) * (rank - seen) / count
        seen += count
    return bounds[-1]


@dataclass
class Sample:
    """One second of traffic: version -> (req/s, 5xx/s, p50 ms, p99 ms)."""

    time: float
    versions: dict[str, tuple[float, float, float | None, float | None]]


@dataclass
class EntryCounts:
    """The counters of one way into a service (its endpoint, or the gateway), kept
    growing across restarts of the process that serves that entry.

    Each process counts from zero, so the entry's counters are every process's last
    counters added up. The process heard from before the current one is kept apart
    rather than folded at once: when ``service.load_balancer.workers`` changes, the
    old LB drains beside its successor and reports until it ends, and folding at
    every change of ``lb_pid`` would add its counters again each time (the reports
    interleave). Older processes are folded into ``base``. (A new LB given at once
    the pid of the one before the current would be taken for it: pids come round far
    more slowly than load balancers restart.)
    """

    pid: int | None = None
    base: dict[str, Any] = field(default_factory=dict)  # the processes gone, added up
    last: dict[str, Any] = field(default_factory=dict)  # the current process's
    before: tuple[int | None, dict[str, Any]] | None = None  # the previous process's
    _rest: dict[str, Any] = field(default_factory=dict)  # base and before, added up

    def ingest(self, pid: int | None, counts: dict[str, Any]) -> None:
        if self.pid is not None and pid != self.pid:
            before = self.before
            if before is not None and before[0] != pid:
                # A third process: the one before the current is gone.
                self.base = merge_counts(self.base, before[1])
            # (Else the previous process reported again: it and the current swap.)
            self.before = (self.pid, self.last)
            self._rest = merge_counts(self.base, self.last) if self.base else self.last
        self.pid = pid
        self.last = counts

    def counts(self) -> dict[str, Any]:
        """Cumulative counters across every process this controller has heard from."""
        return merge_counts(self._rest, self.last) if self._rest else self.last


class Traffic:
    """One service's load-balancer counters as the controller has received them:
    from its own load balancer (entry ``endpoint``) and from the gateway (``gateway``)
    when the service has a route prefix."""

    def __init__(self) -> None:
        self.entries: dict[str, EntryCounts] = {}
        self.received_at = 0.0  # the service's own load balancer's latest report
        self.samples: deque[Sample] = deque(maxlen=int(WINDOW_S / SAMPLE_S))
        self._prev: tuple[float, dict[str, VersionTotals]] | None = None

    @property
    def last(self) -> dict[str, Any]:
        """The service's own load balancer's latest counters."""
        endpoint = self.entries.get(ENDPOINT)
        return endpoint.last if endpoint is not None else {}

    def by_entry(self) -> list[dict[str, Any]]:
        """Each entry's cumulative counters, labelled with it (for ``/metrics``)."""
        return [{**e.counts(), "entry": name} for name, e in sorted(self.entries.items())]

    def counts(self) -> dict[str, Any]:
        """Cumulative counters of the whole service, every entry added up (what the
        dashboard's rates and canary analysis read)."""
        parts = [e.counts() for _, e in sorted(self.entries.items())]
        if len(parts) == 1:
            return parts[0]
        return reduce(merge_counts, parts, {})

    def ingest(
        self, lb_pid: int | None, counts: dict[str, Any], now: float, entry: str = ENDPOINT
    ) -> None:
        source = self.entries.get(entry)
        if source is None:
            source = self.entries[entry] = EntryCounts()
        source.ingest(lb_pid, counts)
        if entry == ENDPOINT:
            self.received_at = now
        prev = self._prev
        if prev is not None and now - prev[0] < SAMPLE_S:
            return  # reports come twice a second: the totals only once a sample is due
        totals = version_totals(self.counts())
        if prev is None:
            self._prev = (now, totals)
            return
        self.samples.append(_sample(prev, now, totals))
        self._prev = (now, totals)

    def timeseries(self, since: float = 0.0) -> dict[str, Any]:
        """The samples as column arrays for the dashboard's charts."""
        samples = [s for s in self.samples if s.time > since]
        versions = sorted({v for s in samples for v in s.versions}, key=_version_order)
        series: dict[str, dict[str, list[float | None]]] = {}
        for version in versions:
            columns: dict[str, list[float | None]] = {"rps": [], "errors": [], "p50": [], "p99": []}
            for s in samples:
                values = s.versions.get(version)
                for name, value in zip(
                    ("rps", "errors", "p50", "p99"),
                    values if values is not None else (None, None, None, None),
                    strict=True,
                ):
                    columns[name].append(value)
            series["none" if version == "0" else version] = columns
        return {"time": [s.time for s in samples], "versions": series}


def _version_order(version: str) -> tuple[int, str]:
    return (int(version) if version.isdigit() else 1 << 30, version)


def _sample(
    prev: tuple[float, dict[str, VersionTotals]], now: float, totals: dict[str, VersionTotals]
) -> Sample:
    then, before = prev
    elapsed = now - then
    versions: dict[str, tuple[float, float, float | None, float | None]] = {}
    for version, cur in totals.items():
        old = before.get(version, VersionTotals())
        requests = max(cur.requests - old.requests, 0.0)
        if requests == 0 and version == "0":
            continue  # show "answered by the LB" only when it happens
        errors = max(cur.errors - old.errors, 0.0)
        deltas = [
            max(c - (old.buckets[i] if i < len(old.buckets) else 0.0), 0.0)
            for i, c in enumerate(cur.buckets)
        ]
        p50 = quantile(0.5, LATENCY_BUCKETS, deltas)
        p99 = quantile(0.99, LATENCY_BUCKETS, deltas)
        versions[version] = (
            round(requests / elapsed, 3),
            round(errors / elapsed, 3),
            None if p50 is None else round(p50 * 1000, 3),
            None if p99 is None else round(p99 * 1000, 3),
        )
    return Sample(now, versions)


class Observer:
    """The controller's traffic view of every service, fed by the LB reports."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.traffic: dict[str, Traffic] = {}
        # Whose traffic it is: a name taken down (or purged) and made again between
        # two scrapes is a new service, and must not export the old one's counters.
        self._owners: dict[str, object] = {}

    def ingest(self, service: str, report: Mapping[str, Any], entry: str = ENDPOINT) -> None:
        """Take the metrics part of an LB report (reports without one are ignored);
        ``entry``: whose report it is, the service's load balancer or the gateway."""
        counts = report.get("metrics")
        if not isinstance(counts, dict):
            return
        pid = report.get("lb_pid")
        self.live()  # a name made again starts from nothing
        owner = self.controller.services.get(service)
        if owner is None:
            return
        self._owners[service] = owner
        traffic = self.traffic.setdefault(service, Traffic())
        traffic.ingest(
            pid if isinstance(pid, int) else None, counts, self.controller.clock.wall(), entry
        )

    def live(self) -> dict[str, Traffic]:
        """Traffic of the services that still exist (forget the ones taken down,
        and those whose name now belongs to a service made again)."""
        services = self.controller.services
        for name in [n for n in self.traffic if services.get(n) is not self._owners.get(n)]:
            del self.traffic[name]
            self._owners.pop(name, None)
        return self.traffic


class ControllerCollector(Collector):
    """``/metrics`` of the controller: every LB's counters plus the ``steady_*`` state."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer

    def collect(self) -> Iterator[Metric]:
        traffic = self.observer.live()
        yield from families(
            (name, counts) for name, t in sorted(traffic.items()) for counts in t.by_entry()
        )
        yield from self._state(traffic)

    def _state(self, traffic: Mapping[str, Traffic]) -> Iterator[Metric]:
        controller = self.observer.controller
        now = controller.clock.wall()
        lb_up = GaugeMetricFamily(
            "steady_lb_up",
            "1 when the service's load balancer reported in the last 5 seconds.",
            labels=["service"],
        )
        replicas = GaugeMetricFamily(
            "steady_replicas",
            "Replicas by service, version and state.",
            labels=["service", "version", "state"],
        )
        target = GaugeMetricFamily(
            "steady_service_target_replicas",
            "Replicas the service should run now (the autoscaler's target when it has one).",
            labels=["service"],
        )
        ready = GaugeMetricFamily(
            "steady_service_ready_replicas", "Replicas that are READY.", labels=["service"]
        )
        version = GaugeMetricFamily(
            "steady_service_version", "The service's current version.", labels=["service"]
        )
        updates = CounterMetricFamily(
            "steady_updates",
            "Finished updates by mode and outcome (succeeded, failed, rolled_back).",
            labels=["service", "mode", "outcome"],
        )
        in_progress = GaugeMetricFamily(
            "steady_update_in_progress",
            "1 while an update of the service runs.",
            labels=["service", "mode"],
        )
        duration = HistogramMetricFamily(
            "steady_update_duration_seconds",
            "How long finished updates took, by mode.",
            labels=["service", "mode"],
        )
        ticks = GaugeMetricFamily(
            "steady_reconcile_tick_seconds",
            "Reconcile tick time over the last 200 ticks (quantile 1 is the slowest).",
            labels=["service", "quantile"],
        )
        for name, runtime in sorted(controller.services.items()):
            seen = traffic.get(name)
            fresh = seen is not None and now - seen.received_at < REPORT_FRESH_S
            lb_up.add_metric([name], 1.0 if fresh else 0.0)
            by_state: dict[tuple[str, str], int] = {}
            for replica in runtime.replicas.values():
                key = (str(replica.version), replica.status)
                by_state[key] = by_state.get(key, 0) + 1
            for (v, state), n in sorted(by_state.items()):
                replicas.add_metric([name, v, state], n)
            target.add_metric([name], runtime.spec.service.target_replicas)
            ready.add_metric(
                [name], sum(1 for r in runtime.replicas.values() if r.status is ReplicaStatus.READY)
            )
            version.add_metric([name], runtime.row.version)
            outcomes: dict[tuple[str, str], int] = {}
            durations: dict[str, list[float]] = {}
            for update in controller.store.updates(name):
                if update.status is UpdateStatus.IN_PROGRESS or update.finished_at is None:
                    continue
                key2 = (update.mode, update.status.lower())
                outcomes[key2] = outcomes.get(key2, 0) + 1
                durations.setdefault(update.mode, []).append(update.finished_at - update.started_at)
            for (mode, outcome), n in sorted(outcomes.items()):
                updates.add_metric([name, mode, outcome], n)
            current = runtime.rollout.update
            if current is not None and current.status is UpdateStatus.IN_PROGRESS:
                in_progress.add_metric([name, current.mode], 1.0)
            for mode, seconds in sorted(durations.items()):
                duration.add_metric(
                    [name, mode], _cumulative(UPDATE_BUCKETS, seconds), sum_value=sum(seconds)
                )
            recent = sorted(runtime.tick_seconds)
            if recent:
                for q in TICK_QUANTILES:
                    index = min(int(q * len(recent)), len(recent) - 1)
                    ticks.add_metric([name, str(q)], recent[index])
        yield from (lb_up, replicas, target, ready, version, updates, in_progress, duration, ticks)


def _cumulative(bounds: Sequence[float], values: Sequence[float]) -> list[tuple[str, float]]:
    out = [(repr(float(b)), float(sum(1 for v in values if v <= b))) for b in bounds]
    out.append(("+Inf", float(len(values))))
    return out
