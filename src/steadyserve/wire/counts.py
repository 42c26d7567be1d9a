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

# Upper bounds (seconds) of the latency histogram: fine below 10 ms for fast
# endpoints, and still resolving answers of several seconds (model inference).
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
)
# Per version: one count per bucket, one for +Inf, then the sum of latencies.
SLOTS = len(LATENCY_BUCKETS) + 2
SUM_SLOT = SLOTS - 1

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
    latency = {k: list(v) for k, v in (base.get("latency") or {}).items()}
    for key, counts in (more.get("latency") or {}).items():
        have = latency.get(key)
        if have is None:
            latency[key] = list(counts)
        else:
            latency[key] = [a + b for a, b in zip(have, counts, strict=False)]
    out["latency"] = latency
    for name in ("bytes_in", "bytes_out", "retries", "upstream_connect_failures", "ejections"):
        out[name] = int(base.get(name) or 0) + int(more.get(name) or 0)
    return out


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
