"""The load balancer's traffic counters, and their Prometheus form.

The hot path pays for one ``record`` per finished request: a tuple key, a dict
increment and a ``bisect`` into a per-version bucket list (two for a response
from a replica: its duration and its time to first byte), with plain ints and
floats (no prometheus_client object is touched per request). Everything else
happens at scrape or report time: ``report`` turns the counters into JSON (what the
load balancer posts to the controller twice a second) and
``exposition.families`` turns such a report into Prometheus metric families.
The load balancer's own loopback metrics port and the controller's ``/metrics``
both render reports that way, so the two always show the same names and labels.
prometheus_client is only imported on the first scrape of the LB's port, so a
load balancer nobody scrapes does not carry it in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from bisect import bisect_left
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steadyserve.lb.access_log import AccessLog
    from steadyserve.lb.downstream import ClientConnection
    from steadyserve.lb.mirror import ShadowCounts
    from steadyserve.lb.proxy import Exchange, Proxy

from steadyserve.wire.counts import (
    CONTENT_TYPE,
    ENDPOINT,
    LATENCY_BUCKETS,
    NO_REPLICA,
    SLOTS,
    SUM_SLOT,
    TTFB_BUCKETS,
    TTFB_SLOTS,
    TTFB_SUM_SLOT,
)

log = logging.getLogger("steadyserve.lb")

BOTH_SLOTS = SLOTS + TTFB_SLOTS
TTFB_SUM = SLOTS + TTFB_SUM_SLOT
FIRST_TTFB_BOUND = TTFB_BUCKETS[0]


class LBMetrics:
    """Plain counters the proxy updates as requests finish."""

    def __init__(self) -> None:
        # (version, replica id, method, status class, outcome) -> requests
        self.requests: dict[tuple[int, int, bytes, int, str], int] = {}
        # version -> bucket counts, +Inf count, latency sum (see SLOTS), then the
        # same of the time to first byte (TTFB_SLOTS): one list, one lookup a request
        self.latency: dict[int, list[float]] = {}
        self.bytes_in = 0
        self.bytes_out = 0
        self.retries = 0
        self.connect_failures = 0
        self.access_log: AccessLog | None = None
        # A shadow step's counts per new version (lb/mirror.py), kept across tables.
        self.shadow: dict[int, ShadowCounts] = {}

    def record(self, ex: Exchange, client: ClientConnection) -> None:
        """Count one finished request (called once per exchange, from the client),
        however it ended (``ex.outcome``): a cut stream is counted with its time so far."""
        now = perf_counter()
        started = ex.started
        elapsed = now - started
        replica = ex.served
        if replica is None:
            version = rid = NO_REPLICA
        else:
            version = replica.version
            rid = replica.id
        head = ex.head
        method = head[: head.find(b" ")] if head else b""
        key = (version, rid, method, ex.status // 100, ex.outcome)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        buckets = self.latency.get(version)
        if buckets is None:
            buckets = self.latency[version] = [0.0] * BOTH_SLOTS
        buckets[bisect_left(LATENCY_BUCKETS, elapsed)] += 1
        buckets[SUM_SLOT] += elapsed
        if replica is None:
            ttfb = -1.0
        else:
            # A response without a body (204, HEAD) has its first byte at its end.
            ttfb = (ex.first_byte or now) - started
            if ttfb <= FIRST_TTFB_BOUND:  # most answers that are not streams: no bisect
                buckets[SLOTS] += 1
            else:
                buckets[SLOTS + bisect_left(TTFB_BUCKETS, ttfb)] += 1
            buckets[TTFB_SUM] += ttfb
        sent = client.bytes_out
        client.bytes_out = 0
        self.bytes_out += sent
        self.bytes_in += client.bytes_in
        client.bytes_in = 0
        if self.access_log is not None:
            self.access_log.request(ex, version, rid, elapsed, sent, ttfb)

    def answered(self) -> int:
        """Requests answered so far (the retry budget earns on them)."""
        return sum(self.requests.values())

    def report(self) -> dict[str, Any]:
        """The counters as JSON: cumulative since this process started."""
        return {
            "requests": {
                f"{v} {r} {m.decode('latin-1') or '-'} {c} {o}": n
                for (v, r, m, c, o), n in self.requests.items()
            },
            "latency_buckets": list(LATENCY_BUCKETS),
            "latency": {str(v): b[:SLOTS] for v, b in self.latency.items()},
            "ttfb_buckets": list(TTFB_BUCKETS),
            "ttfb": {str(v): b[SLOTS:] for v, b in self.latency.items() if v != NO_REPLICA},
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "retries": self.retries,
            "upstream_connect_failures": self.connect_failures,
            **(
                {"shadow": {str(v): c.to_json() for v, c in self.shadow.items()}}
                if self.shadow
                else {}
            ),
        }


class MetricsServer:
    """The load balancer's own ``/metrics``, on a loopback port apart from the service's.

    It runs in the LB's event loop, so a scrape reads the counters without locks.
    One request per connection, GET only; anything else is 404/405.
    """

    def __init__(self, render_text: Callable[[], bytes], host: str = "127.0.0.1") -> None:
        self._render = render_text
        self._host = host
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self, port: int = 0) -> int:
        self._server = await asyncio.start_server(self._handle, self._host, port)
        sockets = getattr(self._server, "sockets", None) or ()
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            method, _, rest = head.partition(b" ")
            path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
            if method != b"GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path != b"/metrics":
                status, ctype, body = "404 Not Found", "text/plain", b"try /metrics\n"
            else:
                status, ctype, body = "200 OK", CONTENT_TYPE, self._render()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await asyncio.wait_for(writer.drain(), 5.0)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.LimitOverrunError:
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


def live_report(proxy: Proxy, metrics_port: int = 0, entry: str = ENDPOINT) -> dict[str, Any]:
    """The counters plus the gauges only the running proxy knows.

    The gateway reports each of its services' lanes this way too, as ``entry``
    "gateway" and without a metrics port of its own."""
    balancer = proxy.balancer
    report = proxy.metrics.report()
    report["entry"] = entry
    report["inflight_total"] = sum(r.inflight for r in balancer.known.values())
    report["queued"] = len(proxy.waiting)
    report["ejections"] = balancer.ejections
    if metrics_port:
        report["metrics_port"] = metrics_port
    if proxy.websockets is not None:  # open and total WebSockets per replica
        report.update(proxy.websockets.report())
    return report
