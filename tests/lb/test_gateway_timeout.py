"""Which ``request_timeout_s`` a gateway lane holds: Ray's ``http_options`` one
unless the service's own is shorter, and the request id Ray's 408 names."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from steadyserve.lb.balancer import Balancer
from steadyserve.lb.gateway import LaneProxy, request_id_of
from steadyserve.lb.proxy import Exchange
from steadyserve.wire.routes import Limits, RouteTable


def table(timeout: float | None) -> RouteTable:
    return RouteTable(
        epoch="e",
        version=1,
        policy="least_load",
        max_ongoing_requests=5,
        max_queued_requests=-1,
        replicas=(),
        limits=Limits(request_timeout_s=timeout),
    )


@pytest.mark.parametrize(
    ("service", "gateway", "held", "by_gateway"),
    [
        (None, None, None, False),
        (None, 1.0, 1.0, True),
        (5.0, 1.0, 1.0, True),
        (0.5, 1.0, 0.5, False),  # the service's shorter one: its own 504
        (2.0, None, 2.0, False),
    ],
)
def test_the_shorter_timeout_is_held(
    service: float | None, gateway: float | None, held: float | None, by_gateway: bool
) -> None:
    async def check() -> None:
        lane = LaneProxy("svc", Balancer(None))
        lane.set_gateway_timeout(gateway)
        lane.apply_table(table(service))
        assert (lane.limits.request_timeout_s, lane.by_gateway) == (held, by_gateway)
        lane.set_gateway_timeout(None)  # the gateway's dropped: the service's again
        assert (lane.limits.request_timeout_s, lane.by_gateway) == (service, False)

    asyncio.run(check())


class Client:
    """The little of a client connection that an exchange needs here."""


def test_the_408_names_the_clients_request_id_or_a_new_one() -> None:
    ex = Exchange(Client())  # type: ignore[arg-type]
    ex.head = b"GET / HTTP/1.1\r\nhost: x\r\nX-Request-ID:  abc-1 \r\n\r\n"
    assert request_id_of(ex) == "abc-1"
    ex.head = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
    assert uuid.UUID(request_id_of(ex))  # as Ray makes one
    ex.request_id = b"lb-7"  # the access log's id wins
    assert request_id_of(ex) == "lb-7"
