"""Draining counts every load balancer that routes a service: its own (each of its
workers) and the gateway, which is one more view of the same route table
(``consumer:gateway``, as the controller's API names it)."""

from __future__ import annotations

import asyncio

from steadyserve.controller import routes
from steadyserve.controller.routes import RoutePublisher

GATEWAY = "consumer:gateway"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def publisher_with_two_versions(clock: Clock) -> RoutePublisher:
    async def build() -> RoutePublisher:
        pub = RoutePublisher("e1", clock=clock)
        pub.publish({"replicas": [1, 2]})
        pub.publish({"replicas": [2]})  # replica 1 removed in version 2
        return pub

    return asyncio.run(build())


def gateway_report(
    pub: RoutePublisher, table: str, inflight: dict[int, int], requests: dict[int, int]
) -> tuple[dict[int, int], dict[int, int], int, dict[str, object]]:
    return pub.report(table, inflight, requests, 0, {"worker": GATEWAY})


def test_replica_not_drained_while_the_gateway_routes_by_an_old_table() -> None:
    pub = publisher_with_two_versions(Clock())
    pub.acknowledge("e1:1", GATEWAY)  # the gateway polled, still on version 1
    gateway_report(pub, "e1:1", {1: 0}, {1: 5})
    pub.acknowledge("e1:2")  # the service's own LB is up to date and idle
    pub.report("e1:2", {}, {})
    assert not pub.drained(1, 2)
    pub.acknowledge("e1:2", GATEWAY)
    gateway_report(pub, "e1:2", {1: 1}, {1: 6})  # ... but a request still in flight
    assert not pub.drained(1, 2)
    gateway_report(pub, "e1:2", {1: 0}, {1: 6})
    assert pub.drained(1, 2)


def test_gateway_reports_do_not_overwrite_the_own_load_balancers() -> None:
    pub = publisher_with_two_versions(Clock())
    pub.acknowledge("e1:2")
    pub.report("e1:2", {1: 3}, {1: 9})
    pub.acknowledge("e1:2", GATEWAY)
    gateway_report(pub, "e1:2", {}, {})
    assert pub.inflight == {1: 3}
    assert not pub.drained(1, 2)


def test_a_gateway_gone_silent_does_not_hold_draining_forever() -> None:
    clock = Clock()
    pub = publisher_with_two_versions(clock)
    pub.acknowledge("e1:1", GATEWAY)
    pub.acknowledge("e1:2")
    pub.report("e1:2", {}, {})
    assert not pub.drained(1, 2)
    clock.now += routes.WORKER_STALE_S + 1
    pub.acknowledge("e1:2")
    pub.report("e1:2", {}, {})
    assert pub.drained(1, 2)


def test_autoscaling_sees_the_gateways_traffic_too() -> None:
    pub = publisher_with_two_versions(Clock())
    pub.acknowledge("e1:2", GATEWAY)
    pub.report("e1:2", {2: 3}, {2: 40}, 2, {"worker": GATEWAY})
    inflight, requests, queued, _ = pub.report("e1:2", {2: 1}, {2: 10}, 1)
    assert (inflight, requests, queued) == ({2: 4}, {2: 50}, 3)
