"""What the controller does with one load report of a service's load balancer worker
(or of the gateway): the one entry ``POST /api/v1/lb/{name}/report`` calls.

A report feeds draining (in-flight counts per worker), autoscaling (request counts
summed over the workers), ``/metrics`` and the dashboard (the counters), and a
canary's analysis and shadow verdict (the per-version counts). Kept apart from the
HTTP handler so that everything fed by a report is fed the same way wherever the
report comes from: the deterministic simulator (steadyserve/sim/) posts its load
balancer's reports here, with no socket, and so judges the code the API runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steadyserve.controller.metrics import Observer
    from steadyserve.controller.runtime import ServiceRuntime
    from steadyserve.wire.load_report import LoadReport


def take_report(
    runtime: ServiceRuntime, observer: Observer, report: LoadReport, data: dict[str, Any]
) -> None:
    """Take ``report`` (``data``: the JSON it was read from, kept for its metrics)."""
    inflight, requests, queued = report.inflight, report.requests, report.queued
    consumer = report.consumer  # the gateway: one more view of the service
    if consumer is not None:
        # Counted for draining and, summed into the service LB's own next report,
        # for autoscaling. Its counters are not merged into the LB's but kept as
        # the service's entry="gateway" series.
        view = {k: v for k, v in data.items() if k != "metrics"}
        view["worker"] = f"consumer:{consumer}"
        runtime.routes.report(report.table, inflight, requests, queued, view)
        observer.ingest(runtime.name, data, entry=consumer)
        return
    # One view of the service summed over the LB's workers.
    inflight, requests, queued, data = runtime.routes.report(
        report.table, inflight, requests, queued, data
    )
    # The autoscaler's load window (controller/load.py) takes the differences
    # view by view, so a gateway restart is no burst.
    views = {key: view.requests for key, view in runtime.routes.workers.items()}
    runtime.autoscaler.load.lb_report(
        runtime.clock.now(), inflight, requests, queued, report.lb_pid, views
    )
    observer.ingest(runtime.name, data)
    runtime.canary.ingest(observer.traffic.get(runtime.name))  # the canary's analysis
