"""Autoscaling counts the requests that come through the gateway, and a gateway
that restarts or stops serving a service is not mistaken for a burst.

The route publisher and the load window are combined as the controller's report
handler combines them (controller/api.py): each view's cumulative per-replica
counts go to the load window, which takes the differences view by view."""

from __future__ import annotations

import asyncio

from steadyserve.controller import routes
from steadyserve.controller.load import ServiceLoad
from steadyserve.controller.routes import RoutePublisher
from steadyserve.core.autoscale import LoadSample

GATEWAY = "consumer:gateway"
LB_PID = 7


class Fleet:
    """One service: its load balancer (pid 7) and the gateway, on a simulated clock."""

    def __init__(self) -> None:
        self.now = 100.0

        async def build() -> RoutePublisher:
            pub = RoutePublisher("e1", clock=lambda: self.now)
            pub.publish({"replicas": [1]})
            return pub

        self.pub = asyncio.run(build())
        self.load = ServiceLoad(span=60)

    def gateway(self, requests: int) -> None:
        self.pub.report("e1:1", {1: 0}, {1: requests}, 0, {"worker": GATEWAY})

    def lb(self, requests: int) -> LoadSample:
        """The load balancer's report, as the controller handles it; 0.5 s later."""
        self.now += 0.5
        inflight, summed, queued, _ = self.pub.report(
            "e1:1", {1: 0}, {1: requests}, 0, {"worker": str(LB_PID)}
        )
        views = {key: view.requests for key, view in self.pub.workers.items()}
        return self.load.lb_report(self.now, inflight, summed, queued, LB_PID, views)


def test_gateway_requests_count_and_a_restarted_gateway_is_no_burst() -> None:
    fleet = Fleet()
    fleet.gateway(5000)
    fleet.lb(10_000)  # the first report: a baseline
    fleet.gateway(5040)
    assert fleet.lb(10_060).started == 60 + 40  # both entries' requests
    fleet.gateway(7)  # the gateway restarted: its counters start again from zero
    assert fleet.lb(10_080).started == 20 + 7
    fleet.gateway(9)
    assert fleet.lb(10_080).started == 2


def test_a_gateway_that_stops_reporting_is_no_burst() -> None:
    fleet = Fleet()
    fleet.gateway(5000)
    fleet.lb(10_000)
    fleet.gateway(5010)
    assert fleet.lb(10_000).started == 10
    # The service left the gateway's map: its reports stop, its view goes stale.
    steps = int(routes.WORKER_STALE_S / 0.5) + 2
    started = [fleet.lb(10_000 + 3 * (i + 1)).started for i in range(steps)]
    assert GATEWAY not in fleet.pub.workers
    assert started == [3] * steps


def test_a_gateway_first_heard_of_after_a_controller_restart_is_no_burst() -> None:
    """The gateway outlives the controller: what it counted before is not new."""
    fleet = Fleet()
    fleet.lb(10_000)  # the restarted controller's first report: a baseline
    fleet.gateway(5000)
    assert fleet.lb(10_010).started == 10
    fleet.gateway(5004)
    assert fleet.lb(10_010).started == 4
