"""Queue-aware scoring: scrape each replica's own Prometheus gauge, off the request path.

An LLM engine knows its own queue better than the load balancer's in-flight
count does (vLLM's ``vllm:num_requests_waiting``, SGLang's queue length, a
user-named gauge): requests from other clients, a long prefill in progress. With
``service.load_balancer.replica_metrics`` set, one scraper per service fetches
``path`` from every routable replica every ``interval_s`` (each fetch bounded by
``timeout_s`` and 1 MiB), sums the samples of ``gauge`` (all label sets), and
sets ``ReplicaState.queue``; ``prefix_affinity`` and ``session_affinity`` weigh
replicas by it instead of the in-flight count while it is at most ``max_age_s``
old (policies.load_of), and fall back to the count when it is stale, missing or
unparsable. The scraper runs in the load balancer, in worker 0 only (or the one
process); with several workers, worker 0 publishes the values through the
shared-load file and the others read them there (shared_load.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from steadyserve.core.routing.options import ReplicaMetrics
from steadyserve.lb.balancer import Balancer
from steadyserve.wire.netns import connect_in

log = logging.getLogger("steadyserve.lb.metrics_scrape")

MAX_BYTES = 1 << 20


def gauge_value(text: str, gauge: str) -> float | None:
    """The sum of ``gauge``'s samples in a Prometheus text exposition, or None."""
    total = 0.0
    found = False
    for line in text.splitlines():
        if not line.startswith(gauge) or line.startswith("#"):
            continue
        rest = line[len(gauge) :]
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                continue
            rest = rest[close + 1 :]
        elif rest[:1] not in (" ", "\t"):
            continue  # another metric whose name starts with this one
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if value == value:  # NaN is no reading
            total += value
            found = True
    return total if found else None


async def fetch(host: str, port: int, path: str, timeout: float, netns: str | None = None) -> str:
    """One HTTP/1.0 GET; the body as text. Raises OSError/TimeoutError/ValueError.
    ``netns``: the replica is in that network namespace (``service.isolation``)."""

    async def get() -> str:
        if netns is None:
            reader, writer = await asyncio.open_connection(host, port)
        else:
            reader, writer = await asyncio.open_connection(sock=await connect_in(netns, host, port))
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            data = await reader.read(MAX_BYTES)
            while len(data) < MAX_BYTES:
                more = await reader.read(MAX_BYTES - len(data))
                if not more:
                    break
                data += more
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep or b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
            raise ValueError("not a 200 answer")
        return body.decode("utf-8", "replace")

    return await asyncio.wait_for(get(), timeout)


class Scraper:
    """The scrape loop of one load balancer (worker 0) for the table's replicas."""

    def __init__(
        self,
        balancer: Balancer,
        publish: Callable[[int, float | None], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.balancer = balancer
        self.publish = publish  # to the other workers (shared_load.SharedLoad.publish_queue)
        self.clock = clock
        self.readings: dict[int, tuple[float, float]] = {}  # id -> (value, when)
        self.scrapes = 0
        self.failures = 0

    def settle(self, config: ReplicaMetrics) -> None:
        """Set each replica's ``queue`` from its reading, None once it is stale."""
        now = self.clock()
        for replica in self.balancer.replicas:
            reading = self.readings.get(replica.id)
            fresh = reading is not None and now - reading[1] <= config.max_age_s
            replica.queue = reading[0] if fresh and reading is not None else None
            if self.publish is not None:
                self.publish(replica.id, replica.queue)
        ids = {r.id for r in self.balancer.replicas}
        for rid in list(self.readings):
            if rid not in ids:
                del self.readings[rid]  # left the table (or restarted under a new id)

    async def scrape_once(self, config: ReplicaMetrics) -> None:
        replicas = list(self.balancer.replicas)

        async def one(rid: int, host: str, port: int, netns: str | None) -> None:
            try:
                text = await fetch(host, port, config.path, config.timeout_s, netns)
            except (OSError, asyncio.TimeoutError, ValueError) as exc:
                self.failures += 1
                log.debug("replica %d: metrics scrape failed: %r", rid, exc)
                return
            value = gauge_value(text, config.gauge)
            if value is None:
                self.failures += 1
                return
            self.readings[rid] = (value, self.clock())

        self.scrapes += 1
        await asyncio.gather(*(one(r.id, r.host, r.port, r.netns) for r in replicas))
        self.settle(config)

    async def run(self) -> None:
        """Scrape while the table asks for it; idle (checking once a second) otherwise."""
        while True:
            config = self.balancer.options.replica_metrics
            if config is None:
                if self.readings:
                    self.readings.clear()
                    for replica in self.balancer.replicas:
                        replica.queue = None
                        if self.publish is not None:
                            self.publish(replica.id, None)
                await asyncio.sleep(1.0)
                continue
            await self.scrape_once(config)
            await asyncio.sleep(config.interval_s)
