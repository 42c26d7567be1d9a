"""The load balancer's limits: spec fields, change classification, route-table form."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from steadyserve.spec import ServiceSpec, parse_service
from steadyserve.spec.changes import classify
from steadyserve.wire.routes import Limits, RouteTable

RUN = "python server.py --port $PORT"


def spec(tmp_path: Path, **service: Any) -> ServiceSpec:
    return parse_service(
        {"name": "svc", "run": RUN, "service": {"replicas": 1, **service}}, base_dir=tmp_path
    )


def test_defaults_match_the_load_balancers(tmp_path: Path) -> None:
    svc = spec(tmp_path).service
    defaults = Limits()
    assert svc.request_timeout_s is None
    assert svc.load_balancer.model_dump() == {
        "header_timeout_s": defaults.header_timeout_s,
        "body_timeout_s": defaults.body_timeout_s,
        "idle_timeout_s": defaults.idle_timeout_s,
        "max_connections": defaults.max_connections,
        "workers": 1,  # not a limit: how many LB processes the controller runs
        # Not limits either: the request-aware policies' tuning (core/routing/options.py).
        "prefix_affinity": {
            "block_bytes": 256,
            "max_entries_per_replica": 8192,
            "imbalance_threshold": 4.0,
        },
        "affinity_key": None,
        "affinity_epsilon": 0.25,
        "replica_metrics": None,
        "trusted_proxies": list(defaults.trusted_proxies),  # the access log's client
        "idempotent_methods": list(defaults.idempotent_methods),  # sent again on failure
    }


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"load_balancer": {"header_timeout": 5}}, "header_timeout"),
        ({"load_balancer": {"body_timeout_s": 0}}, "body_timeout_s"),
        ({"load_balancer": {"max_connections": -1}}, "max_connections"),
        ({"request_timeout_s": "soon"}, "request_timeout_s"),
        ({"load_balancer": {"workers": 0}}, "workers"),
        ({"load_balancer": {"workers": "many"}}, "workers"),
        ({"websocket_drain_s": -1}, "websocket_drain_s"),
        ({"load_balancer": {"idempotent_methods": ["post"]}}, "idempotent_methods"),
        ({"load_balancer": {"idempotent_methods": ["CONNECT"]}}, "idempotent_methods"),
        ({"load_balancer": {"idempotent_methods": "POST"}}, "idempotent_methods"),
    ],
)
def test_bad_limits_are_refused_naming_the_field(
    tmp_path: Path, fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        spec(tmp_path, **fields)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("load_balancer", {"header_timeout_s": 5}),
        ("request_timeout_s", 30),
        ("load_balancer", {"workers": "auto"}),
        ("websocket_drain_s", 60),
        ("load_balancer", {"idempotent_methods": ["POST"]}),
    ],
)
def test_limit_changes_are_in_place(tmp_path: Path, field: str, value: Any) -> None:
    result = classify(
        spec(tmp_path),
        spec(tmp_path, **{field: value}),
        old_workdir_hash=None,
        new_workdir_hash=None,
    )
    assert [(c.path, c.kind) for c in result.changes] == [(f"service.{field}", "in_place")]
    assert not result.needs_restart


def table(**extra: Any) -> dict[str, Any]:
    return {
        "epoch": "e",
        "version": 1,
        "policy": "least_load",
        "max_ongoing_requests": 1,
        "max_queued_requests": -1,
        "replicas": [],
        **extra,
    }


def test_route_table_carries_the_limits(tmp_path: Path) -> None:
    svc = spec(tmp_path, load_balancer={"max_connections": 7}, request_timeout_s=2).service
    parsed = RouteTable.from_json(
        table(load_balancer=svc.load_balancer.model_dump(), request_timeout_s=2.0)
    )
    assert parsed.limits == Limits(max_connections=7, request_timeout_s=2.0)
    assert RouteTable.from_json(table()).limits is None  # an older controller: LB's own


@pytest.mark.parametrize(
    "extra",
    [
        {"load_balancer": {"max_connections": 0}},
        {"load_balancer": {"idle_timeout_s": "x"}},
        {"load_balancer": {"nope": 1}},
        {"load_balancer": []},
        {"request_timeout_s": -1},
    ],
)
def test_bad_route_table_limits_are_refused(extra: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="route table"):
        RouteTable.from_json(table(**extra))


def test_connection_cap_stays_below_the_file_descriptor_limit() -> None:
    from steadyserve.lb.balancer import Balancer
    from steadyserve.lb.proxy import FD_RESERVE, Proxy

    async def caps() -> tuple[int, int]:
        low = Proxy("s", Balancer(None), limits=Limits(max_connections=10000), fd_limit=1000)
        high = Proxy("s", Balancer(None), limits=Limits(max_connections=50), fd_limit=1000)
        return low.max_connections, high.max_connections

    assert asyncio.run(caps()) == ((1000 - FD_RESERVE) // 2, 50)


def test_marked_methods_reach_the_proxy_in_place(tmp_path: Path) -> None:
    """``idempotent_methods`` goes through the route table to the proxy, which sends
    a marked POST again like a GET (lb/retry.py), and forgets it when unmarked."""
    from steadyserve.lb.balancer import Balancer
    from steadyserve.lb.proxy import Proxy
    from steadyserve.lb.retry import IDEMPOTENT_METHODS

    svc = spec(tmp_path, load_balancer={"idempotent_methods": ["POST", "M-SEARCH"]}).service
    marked = RouteTable.from_json(table(load_balancer=svc.load_balancer.model_dump()))
    assert marked.limits is not None
    assert marked.limits.idempotent_methods == ("POST", "M-SEARCH")

    async def run() -> list[frozenset[bytes]]:
        proxy = Proxy("svc", Balancer(None))
        seen = [proxy.idempotent_methods]
        proxy.apply_table(marked)
        seen.append(proxy.idempotent_methods)
        proxy.apply_table(RouteTable.from_json(table(load_balancer={})))
        seen.append(proxy.idempotent_methods)
        return seen

    before, during, after = asyncio.run(run())
    assert before == after == IDEMPOTENT_METHODS
    assert during == IDEMPOTENT_METHODS | {b"POST", b"M-SEARCH"}
