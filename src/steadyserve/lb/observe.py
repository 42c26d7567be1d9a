"""The load balancer's observability, wired together: metrics port, reports, access log.

Kept out of ``server.py`` so the LB's lifecycle code only calls ``start``,
``apply_table``, ``sweep`` and ``stop``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steadyserve.home.paths import Home
from steadyserve.lb.access_log import AccessLog
from steadyserve.lb.metrics import LBMetrics, MetricsServer, live_report
from steadyserve.wire.counts import ENDPOINT
from steadyserve.wire.routes import RouteTable

if TYPE_CHECKING:
    from steadyserve.lb.proxy import Proxy
    from steadyserve.lb.server import LBConfig

log = logging.getLogger("steadyserve.lb")


def access_log_path(home: Home, service: str) -> Path:
    """Where a service's request log goes: next to its load balancer's log."""
    return home.service_dir(service) / "access.log"


def follow_access_log(metrics: LBMetrics, wanted: bool, path: Path, entry: str = ENDPOINT) -> None:
    """Turn a proxy's request log on or off as its route table says (in place); the
    service's load balancer and the gateway's lane for the service both do."""
    if wanted and metrics.access_log is None:
        metrics.access_log = AccessLog(path, entry=entry)
        log.info("access log on: %s", path)
    elif not wanted and metrics.access_log is not None:
        metrics.access_log.close()
        metrics.access_log = None
        log.info("access log off: %s", path)


class Observability:
    def __init__(self, proxy: Proxy, home: Home, config: LBConfig) -> None:
        self.proxy = proxy
        self.config = config
        self.path = config.access_log or access_log_path(home, config.service)
        self.server = MetricsServer(self._render)
        if config.access_log is not None:
            proxy.metrics.access_log = AccessLog(self.path)

    def _render(self) -> bytes:
        from steadyserve.wire.exposition import ReportCollector, render  # first scrape only

        return render(ReportCollector(self._reports))

    def _reports(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.config.service, live_report(self.proxy, self.server.port))]

    def snapshot(self) -> dict[str, Any]:
        """The load report: the balancer's per-replica counts plus the metrics."""
        return {
            **self.proxy.balancer.snapshot(),
            "metrics": live_report(self.proxy, self.server.port),
        }

    def apply_table(self, table: RouteTable) -> None:
        """Turn the access log on or off as the service spec says (in place)."""
        if self.config.access_log is not None:
            return  # given on the command line: always on
        follow_access_log(self.proxy.metrics, table.access_log, self.path)

    async def start(self) -> None:
        try:
            port = await self.server.start(self.config.metrics_port)
        except OSError as exc:  # metrics are worth less than traffic: serve without them
            log.warning("metrics port %d: %s; no /metrics", self.config.metrics_port, exc)
            return
        log.info("metrics on http://127.0.0.1:%d/metrics", port)

    def sweep(self) -> None:
        access_log = self.proxy.metrics.access_log
        if access_log is not None:
            access_log.flush()

    async def stop(self) -> None:
        await self.server.stop()
        access_log = self.proxy.metrics.access_log
        if access_log is not None:
            access_log.close()
