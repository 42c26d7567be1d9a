"""Helpers of the observability tests: service files, scrapes, sums by label."""

from __future__ import annotations

import http.client
import json
import textwrap
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.steady import EXAMPLES, Steady

SERVER = EXAMPLES / "http_server"


def spec_text(message: str, run: str = "python3 server.py", replicas: int = 2) -> str:
    """The example HTTP server with short probe and drain periods; ``message`` makes
    each version's envs differ, so an update restarts replicas (rolling)."""
    return textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 20
            timeout_seconds: 2
          replicas: {replicas}
          update_deadline_s: 90
          rolling_update:
            max_surge: 1
            max_unavailable: 0
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
        workdir: {SERVER}
        envs:
          MESSAGE: {message}
        run: {run}
        """)


def controller_url(steady: Steady) -> str:
    info = json.loads((steady.home / "controller.json").read_text())
    return str(info["url"])


def get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[str, Metric]:
    status, body = get(url, "/metrics", headers)
    assert status == 200, body
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def requests_by_version(
    families: dict[str, Metric], service: str = "web", entry: str | None = None
) -> dict[str, float]:
    """``steady_lb_requests_total`` summed over replica, method and code, by version
    (and over both entries, the endpoint and the gateway, unless ``entry`` is given)."""
    out: dict[str, float] = {}
    for sample in _samples(families, "steady_lb_requests", "steady_lb_requests_total"):
        if sample.labels["service"] == service and entry in (None, sample.labels.get("entry")):
            version = sample.labels["version"]
            out[version] = out.get(version, 0.0) + sample.value
    return out


def _samples(families: dict[str, Metric], family: str, name: str) -> list[Any]:
    metric = families.get(family)
    return [s for s in metric.samples if s.name == name] if metric is not None else []
