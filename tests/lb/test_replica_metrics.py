"""Queue-aware scoring: the scrape of the replicas' own gauges, and its staleness."""

from __future__ import annotations

import asyncio
import os

from steadyserve.core.routing.options import PolicyOptions, ReplicaMetrics
from steadyserve.lb.balancer import Balancer
from steadyserve.lb.replica_metrics import Scraper, gauge_value
from steadyserve.lb.shared_load import SharedLoad, create
from steadyserve.wire.routes import ReplicaRoute, RouteTable

VLLM = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 3.0
vllm:num_requests_waiting{model_name="m",engine="1"} 2.0
vllm:num_requests_waiting_total 99
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
"""


def test_the_gauge_is_summed_over_its_label_sets_and_only_its_own_name() -> None:
    assert gauge_value(VLLM, "vllm:num_requests_waiting") == 5.0
    assert gauge_value(VLLM, "vllm:gpu_cache_usage_perc") == 0.5
    assert gauge_value("queue_length 7\n", "queue_length") == 7.0
    assert gauge_value(VLLM, "sglang:num_queue_reqs") is None
    assert gauge_value("queue NaN\nqueue x\n", "queue") is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _metrics_server(text: str) -> asyncio.AbstractServer:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = text.encode()
        writer.write(b"HTTP/1.0 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def test_a_fresh_scrape_replaces_the_count_and_a_stale_one_is_dropped() -> None:
    async def scenario() -> None:
        server = await _metrics_server(VLLM)
        port = server.sockets[0].getsockname()[1]
        with socket_closed_port() as dead:
            metrics = ReplicaMetrics(interval_s=1, timeout_s=0.5, max_age_s=5)
            table = RouteTable(
                "e",
                1,
                "prefix_affinity",
                10,
                -1,
                (ReplicaRoute(1, 1, "127.0.0.1", port), ReplicaRoute(2, 1, "127.0.0.1", dead)),
                options=PolicyOptions(replica_metrics=metrics),
            )
            balancer = Balancer(table)
            clock = Clock()
            published: dict[int, float | None] = {}
            scraper = Scraper(balancer, published.__setitem__, clock)
            await scraper.scrape_once(metrics)
            one, two = balancer.replicas
            assert one.queue == 5.0 and two.queue is None and scraper.failures == 1
            assert published == {1: 5.0, 2: None}
            # The busy engine loses to the idle one though the LB sent it nothing.
            assert balancer.choose(None) is two
            clock.now += 6  # no new reading for longer than max_age_s
            scraper.settle(metrics)
            assert one.queue is None and published[1] is None
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())


class socket_closed_port:
    """A loopback port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


def test_worker_zero_publishes_queues_the_other_workers_read() -> None:
    fd = create(2)
    try:
        zero, one = SharedLoad(fd, 2, 0), SharedLoad(fd, 2, 1)
        assert one.queue_of(7) is None
        zero.publish_queue(7, 2.5)
        assert one.queue_of(7) == 2.5 and one.queue_of(7 + 256) is None
        zero.publish_queue(7, None)
        assert one.queue_of(7) is None
        zero.publish(7, 3)
        assert one.others(7) == 3  # the counts' rows are untouched by the queue row
    finally:
        os.close(fd)
