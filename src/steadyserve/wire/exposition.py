"""Load-balancer reports in the Prometheus text format: the ``steady_lb_*`` families.

Used by the LB's loopback metrics port (imported on its first scrape) and by the
controller's ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from steadyserve.core.shadow.verdict import Tally
from steadyserve.wire.counts import (
    COMMON_METHODS,
    ENDPOINT,
    LATENCY_BUCKETS,
    NO_REPLICA,
    TTFB_BUCKETS,
    request_key,
)


def _version_label(version: str | int) -> str:
    return "none" if str(version) == str(NO_REPLICA) else str(version)


def _method_label(method: str) -> str:
    return method if method in COMMON_METHODS else "OTHER"


def families(reports: Iterable[tuple[str, Mapping[str, Any]]]) -> Iterator[Metric]:
    """Prometheus families of ``(service, report)`` pairs: the ``steady_lb_*`` metrics.

    Every series carries ``entry``, the report's own (``endpoint``: the service's
    load balancer, ``gateway``: the gateway port; a report without one is an
    endpoint's, as load balancers older than the label send them). A service
    reached both ways has two reports, so ``sum by (service)`` is its whole traffic.
    """
    requests = CounterMetricFamily(
        "steady_lb_requests",
        "Requests through the load balancer, by version, replica, method, status class and"
        " outcome (completed, client_aborted, replica_failed, cut_by_drain, timed_out);"
        " version and replica 'none': answered by the load balancer itself; code 'none':"
        " no response reached the client.",
        labels=["service", "entry", "version", "replica", "method", "code", "outcome"],
    )
    latency = HistogramMetricFamily(
        "steady_lb_request_duration_seconds",
        "Time from a request's first byte to the end of its response (or to its cut), by version.",
        labels=["service", "entry", "version"],
    )
    ttfb = HistogramMetricFamily(
        "steady_lb_time_to_first_byte_seconds",
        "Time from a request's first byte to the first byte of its response body (a token"
        " stream's first token), by version; responses from replicas only.",
        labels=["service", "entry", "version"],
    )
    inflight = GaugeMetricFamily(
        "steady_lb_requests_in_flight",
        "Requests sent to a replica and not answered yet.",
        labels=["service", "entry"],
    )
    queued = GaugeMetricFamily(
        "steady_lb_requests_queued",
        "Requests waiting for a free slot (every replica at max_ongoing_requests).",
        labels=["service", "entry"],
    )
    retries = CounterMetricFamily(
        "steady_lb_retries", "Requests retried on another replica.", labels=["service", "entry"]
    )
    ejections = CounterMetricFamily(
        "steady_lb_ejections",
        "Times a replica was taken out of rotation for a moment after refusing a connection.",
        labels=["service", "entry"],
    )
    connect_failures = CounterMetricFamily(
        "steady_lb_upstream_connect_failures",
        "Connections to replicas that could not be opened.",
        labels=["service", "entry"],
    )
    bytes_in = CounterMetricFamily(
        "steady_lb_received_bytes", "Bytes received from clients.", labels=["service", "entry"]
    )
    bytes_out = CounterMetricFamily(
        "steady_lb_sent_bytes", "Bytes sent to clients.", labels=["service", "entry"]
    )
    ws_open = GaugeMetricFamily(
        "steady_lb_websockets_open",
        "WebSockets open through the load balancer, by replica (each holds a replica slot).",
        labels=["service", "entry", "replica"],
    )
    ws_total = CounterMetricFamily(
        "steady_lb_websockets",
        "WebSockets the replicas accepted (101) through the load balancer, by replica.",
        labels=["service", "entry", "replica"],
    )
    ws_going_away = CounterMetricFamily(
        "steady_lb_websockets_going_away",
        "WebSockets the load balancer closed with 1001 (their replica drained).",
        labels=["service", "entry"],
    )
    shadow = CounterMetricFamily(
        "steady_lb_shadow_answers",
        "A canary's shadow step, by new version: requests mirrored to it, dropped from the"
        " share (it was busy or not ready), answer pairs compared, alike (compared and equal"
        " before noise is taken out), and noise pairs (two stable answers compared).",
        labels=["service", "entry", "version", "kind"],
    )
    for service, report in reports:
        entry = str(report.get("entry") or ENDPOINT)
        for version, counts in sorted((report.get("shadow") or {}).items()):
            tally = Tally.from_json(counts)
            for kind, count in (
                ("mirrored", tally.mirrored),
                ("dropped", tally.dropped),
                ("compared", tally.compared),
                ("alike", tally.signatures.get("", 0)),
                ("noise_pairs", tally.noise_pairs),
            ):
                shadow.add_metric([service, entry, str(version), kind], float(count))
        merged: dict[tuple[str, str, str, str, str], float] = {}
        for key, n in (report.get("requests") or {}).items():
            v, r, m, c, o = request_key(key)
            code = "none" if c == "0" else f"{c}xx"
            label = (_version_label(v), "none" if r == "0" else r, _method_label(m), code, o)
            merged[label] = merged.get(label, 0) + n
        for (v, r, m, c, o), n in sorted(merged.items()):
            requests.add_metric([service, entry, v, r, m, c, o], n)
        for histogram, name, default in (
            (latency, "latency", LATENCY_BUCKETS),
            (ttfb, "ttfb", TTFB_BUCKETS),
        ):
            bounds = list(report.get(f"{name}_buckets") or default)
            for version, counts in sorted((report.get(name) or {}).items()):
                cumulative, running = [], 0.0
                for bound, count in zip([*map(_bound, bounds), "+Inf"], counts, strict=False):
                    running += count
                    cumulative.append((bound, running))
                histogram.add_metric(
                    [service, entry, _version_label(version)], cumulative, sum_value=counts[-1]
                )
        inflight.add_metric([service, entry], float(report.get("inflight_total") or 0))
        queued.add_metric([service, entry], float(report.get("queued") or 0))
        retries.add_metric([service, entry], float(report.get("retries") or 0))
        ejections.add_metric([service, entry], float(report.get("ejections") or 0))
        connect_failures.add_metric(
            [service, entry], float(report.get("upstream_connect_failures") or 0)
        )
        bytes_in.add_metric([service, entry], float(report.get("bytes_in") or 0))
        bytes_out.add_metric([service, entry], float(report.get("bytes_out") or 0))
        for family, key in ((ws_open, "websockets_open"), (ws_total, "websockets_total")):
            for replica, n in sorted((report.get(key) or {}).items()):
                family.add_metric([service, entry, str(replica)], float(n))
        ws_going_away.add_metric([service, entry], float(report.get("websockets_going_away") or 0))
    yield from (
        requests,
        latency,
        ttfb,
        inflight,
        queued,
        retries,
        ejections,
        connect_failures,
        bytes_in,
        bytes_out,
        ws_open,
        ws_total,
        ws_going_away,
        shadow,
    )


def _bound(value: float) -> str:
    return repr(float(value))


class ReportCollector(Collector):
    """A prometheus_client collector over whatever ``source`` returns at scrape time."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, Mapping[str, Any]]]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        return families(self._source())


def render(collector: Collector) -> bytes:
    """Prometheus text format of one collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
