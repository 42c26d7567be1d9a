"""The loops that keep the load balancer in step with the controller.

The table itself (wire/routes.py) is an immutable value: the proxy swaps whole
tables, so a request never sees half an update. ``RouteClient`` long-polls the
controller for new tables and keeps the last one whenever the controller is
unreachable (the load balancer is a separate process precisely so that a
controller restart never stops traffic); it re-reads the controller's address
from ``STEADY_HOME`` on every attempt because a restarted controller listens on
a new port. ``LoadReporter`` posts per-replica in-flight and request counts back
for the controller's draining and autoscaling. Both are off the hot path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from steadyserve.home.paths import Home
from steadyserve.lb import control_http
from steadyserve.wire.load_report import LoadReport
from steadyserve.wire.routes import RouteTable, service_url

log = logging.getLogger("steadyserve.lb")


class RouteClient:
    """Long-polls the controller and hands every new table to ``on_table``.

    The next poll starts as soon as a table is applied: its ``known=`` is the
    acknowledgement the controller waits for before it stops a draining replica.
    """

    def __init__(
        self,
        home: Home,
        service: str,
        on_table: Callable[[RouteTable], None],
        wait_s: float = 25.0,
        min_backoff_s: float = 0.2,
        max_backoff_s: float = 1.0,
        worker: str = "",
    ) -> None:
        self._home = home
        self._worker = worker  # this LB worker's id in its polls (its acknowledgement)
        self._service = service
        self._on_table = on_table
        self._wait_s = wait_s
        self._min_backoff = min_backoff_s
        self._max_backoff = max_backoff_s
        self.known = ""

    async def poll_once(self) -> RouteTable:
        """One long-poll; raises ControlHTTPError or ValueError when it fails."""
        url = self._home.controller_url()
        if url is None:
            raise control_http.ControlHTTPError("no controller recorded in STEADY_HOME")
        wait = int(self._wait_s) if self._wait_s == int(self._wait_s) else self._wait_s
        target = (
            service_url(url, self._service, "routes")
            + f"?known={quote(self.known, safe=':')}&wait={wait}"
            + (f"&worker={quote(self._worker)}" if self._worker else "")
        )
        status, body = await control_http.request(
            target, timeout=self._wait_s + 10.0, home=self._home
        )
        if status != 200:
            raise control_http.ControlHTTPError(f"routes poll answered {status}")
        return RouteTable.from_json(json.loads(body))

    async def run(self) -> None:
        """Poll forever; keep the last table through any failure."""
        backoff = self._min_backoff
        while True:
            try:
                table = await self.poll_once()
            except (control_http.ControlHTTPError, ValueError) as exc:
                log.debug("route poll failed: %s", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            backoff = self._min_backoff
            if table.key != self.known:
                self._on_table(table)
                self.known = table.key


class LoadReporter:
    """Posts the proxy's per-replica counts every ``interval`` seconds; failures are ignored.

    ``consumer`` names a view other than the service's own load balancer (the gateway)."""

    consumer: str | None = None

    def __init__(
        self,
        home: Home,
        service: str,
        snapshot: Callable[[], Mapping[str, Any]],
        interval: float = 0.5,
    ) -> None:
        self._home = home
        self._service = service
        self._snapshot = snapshot
        self._interval = interval

    def build(self) -> dict[str, Any]:
        snap = self._snapshot()
        return LoadReport(
            table=str(snap.get("table", "")),
            inflight={int(k): v for k, v in snap.get("inflight", {}).items()},
            requests={int(k): v for k, v in snap.get("requests", {}).items()},
            errors={int(k): v for k, v in snap.get("errors", {}).items()},
            queued=int(snap.get("queued", 0)),
            worker=str(snap.get("worker", "")),
            lb_pid=int(snap.get("lb_pid", os.getpid())),
            consumer=self.consumer,
            metrics=snap.get("metrics"),
            time=time.time(),
        ).to_json()

    async def report_once(self) -> bool:
        url = self._home.controller_url()
        if url is None:
            return False
        body = json.dumps(self.build()).encode()
        try:
            status, _ = await control_http.request(
                service_url(url, self._service, "report"),
                method="POST",
                body=body,
                timeout=max(self._interval * 4, 2.0),
                home=self._home,
            )
        except control_http.ControlHTTPError as exc:
            log.debug("load report failed: %s", exc)
            return False
        return 200 <= status < 300

    async def run(self) -> None:
        while True:
            await self.report_once()
            await asyncio.sleep(self._interval)
