"""The traffic counts a load balancer reports, as both sides read them.

A load balancer counts requests per (version, replica, method, status) and
latencies in the buckets below, cumulatively since its process started; it posts
them to the controller in its load report (wire/load_report.py) under
``metrics``. The controller adds up the reports of a service's LB workers with
:func:`merge_counts`, and both the LB's own metrics port and the controller's
``/metrics`` render them with wire/exposition.py, so the two always show the same
names, labels and buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from steadyserve.core.shadow.verdict import Tally

# Upper bounds (seconds) of the latency histogram: fine below 10 ms for fast
# endpoints, still resolving answers of several seconds (model inference), and
# token streams that run for minutes or hours.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
)
# Per version: one count per bucket, one for +Inf, then the sum of latencies.
SLOTS = len(LATENCY_BUCKETS) + 2
SUM_SLOT = SLOTS - 1
# Upper bounds (seconds) of the time-to-first-byte histogram: the time to a
# response's first body byte, which for a token stream is its first token (TTFT):
# tens of milliseconds to seconds, finer where LLM latency targets sit.
TTFB_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    30.0,
    60.0,
)
TTFB_SLOTS = len(TTFB_BUCKETS) + 2
TTFB_SUM_SLOT = TTFB_SLOTS - 1

# How a request ended (the access log's "outcome", the ``outcome`` label). Only
# COMPLETED delivered a whole response; the others were cut after or before it began.
COMPLETED = "completed"
CLIENT_ABORTED = "client_aborted"  # the client went away first
REPLICA_FAILED = "replica_failed"  # the replica's connection broke mid-response
CUT_BY_DRAIN = "cut_by_drain"  # a drain's bound passed: the replica or the LB stopped
TIMED_OUT = "timed_out"  # request_timeout_s passed mid-response
OUTCOMES = (COMPLETED, CLIENT_ABORTED, REPLICA_FAILED, CUT_BY_DRAIN, TIMED_OUT)
# The outcomes a version's replicas caused: errors for canary analysis and the
# dashboard, as a 5xx is (a client leaving, or a drain's bound, is not the version's).
BROKEN_BY_REPLICA = frozenset({REPLICA_FAILED, TIMED_OUT})


def request_key(key: str) -> tuple[str, str, str, str, str]:
    """A report's request-count key, ``"version replica method class outcome"``; a
    key without the outcome (load balancers older than it) is a completed request."""
    parts = str(key).split(" ")
    if len(parts) == 4:
        parts.append(COMPLETED)
    v, r, m, c, o = parts
    return v, r, m, c, o


# httptools only parses the registered methods; the rare ones are folded into
# OTHER at render time so the label's values stay few.
COMMON_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
NO_REPLICA = 0  # answered by the load balancer itself (503 no replica, 400, 413, ...)
# Which port a request came in through: the service's own endpoint (its load
# balancer) or the gateway (a Ray Serve route prefix). Reports carry it as
# "entry", the Prometheus series as the ``entry`` label, access-log lines as a field.
ENDPOINT = "endpoint"
GATEWAY = "gateway"


def merge_counts(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Add two reports' cumulative counters (a restarted LB starts again from zero)."""
    out: dict[str, Any] = dict(more)
    requests = dict(base.get("requests") or {})
    for key, n in (more.get("requests") or {}).items():
        requests[key] = requests.get(key, 0) + n
    out["requests"] = requests
    for histogram in ("latency", "ttfb"):
        out[histogram] = _added(base.get(histogram), more.get(histogram))
    for name in ("bytes_in", "bytes_out", "retries", "upstream_connect_failures", "ejections"):
        out[name] = int(base.get(name) or 0) + int(more.get(name) or 0)
    if base.get("shadow") or more.get("shadow"):
        out["shadow"] = _shadow_added(base.get("shadow"), more.get("shadow"))
    return out


def _shadow_added(base: Any, more: Any) -> dict[str, Any]:
    """Two reports' shadow counts (lb/mirror.py), per new version, added up."""
    out: dict[str, Any] = {}
    for part in (base, more):
        for version, counts in (part if isinstance(part, dict) else {}).items():
            have = out.get(version)
            tally = Tally.from_json(counts)
            out[version] = tally if have is None else have.plus(tally)
    return {v: t.to_json() for v, t in out.items()}


def _added(base: Mapping[str, Any] | None, more: Mapping[str, Any] | None) -> dict[str, Any]:
    """Two per-version histograms added slot by slot. Slots of another layout (a load
    balancer from before the buckets changed) cannot be added: the newer wins."""
    out = {k: list(v) for k, v in (base or {}).items()}
    for key, counts in (more or {}).items():
        have = out.get(key)
        if have is None or len(have) != len(counts):
            out[key] = list(counts)
        else:
            out[key] = [a + b for a, b in zip(have, counts, strict=True)]
    return out


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
