"""Draining counts every load balancer that routes a service: its own and the
gateway (a second consumer of the same route table)."""

from __future__ import annotations

import asyncio

from steadyserve.controller import routes
from steadyserve.controller.routes import RoutePublisher


def publisher_with_two_versions() -> RoutePublisher:
    async def build() -> RoutePublisher:
        pub = RoutePublisher("e1")
        pub.publish({"replicas": [1, 2]})
        pub.publish({"replicas": [2]})  # replica 1 removed in version 2
        return pub

    return asyncio.run(build())


def test_replica_not_drained_while_the_gateway_routes_by_an_old_table() -> None:
    pub = publisher_with_two_versions()
    pub.acknowledge("e1:1", "gateway")  # the gateway polled, still on version 1
    pub.report("e1:1", {1: 0}, {1: 5}, "gateway")
    pub.acknowledge("e1:2")  # the service's own LB is up to date and idle
    pub.report("e1:2", {}, {})
    assert not pub.drained(1, 2)
    pub.acknowledge("e1:2", "gateway")
    pub.report("e1:2", {1: 1}, {1: 6}, "gateway")  # ... but a request still in flight
    assert not pub.drained(1, 2)
    pub.report("e1:2", {1: 0}, {1: 6}, "gateway")
    assert pub.drained(1, 2)


def test_gateway_reports_do_not_overwrite_the_own_load_balancers() -> None:
    pub = publisher_with_two_versions()
    pub.acknowledge("e1:2")
    pub.report("e1:2", {1: 3}, {1: 9})
    pub.acknowledge("e1:2", "gateway")
    pub.report("e1:2", {}, {}, "gateway")
    assert pub.inflight == {1: 3}
    assert not pub.drained(1, 2)


def test_a_gateway_gone_silent_does_not_hold_draining_forever() -> None:
    pub = publisher_with_two_versions()
    pub.acknowledge("e1:1", "gateway")
    pub.acknowledge("e1:2")
    pub.report("e1:2", {}, {})
    assert not pub.drained(1, 2)
    pub.consumers["gateway"].last_poll_at -= routes.CONSUMER_GONE_S + 1
    assert pub.drained(1, 2)


def test_autoscaling_sees_the_gateways_traffic_too() -> None:
    pub = publisher_with_two_versions()
    pub.acknowledge("e1:2", "gateway")
    pub.report("e1:2", {2: 3}, {2: 40}, "gateway", queued=2)
    inflight, requests, queued = pub.with_others({2: 1}, {2: 10}, 1)
    assert (inflight, requests, queued) == ({2: 4}, {2: 50}, 3)
    pub.consumers["gateway"].last_poll_at -= routes.CONSUMER_GONE_S + 1
    assert pub.with_others({2: 1}, {2: 10}, 1) == ({2: 1}, {2: 10}, 1)
