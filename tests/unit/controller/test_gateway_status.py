"""What the gateway status tells ``serve.run``: the route map as the specs are now,
and which routed services' replica tables the gateway's lanes do not hold yet."""

from __future__ import annotations

from pathlib import Path

from steadyserve.controller.gateway import GatewaySupervisor, prefix_conflict
from steadyserve.controller.routes import RoutePublisher
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.spec.loading import parse_service


def _spec(name: str, prefix: str, tmp: Path) -> ServiceSpec:
    doc = {"name": name, "run": "true", "service": {"route_prefix": prefix}}
    return parse_service(doc, base_dir=tmp)


def test_status_shows_a_route_change_before_the_supervision_round(tmp_path: Path) -> None:
    specs = [_spec("app-a", "/", tmp_path)]
    gateway = GatewaySupervisor(Home(tmp_path), "e", lambda: specs)
    first = gateway.status()
    assert first["routes"] == {"/": "app-a"}
    specs[:] = [_spec("app-a", "/my_app", tmp_path)]
    second = gateway.status()
    # The gateway has not acknowledged the new map: serve.run must keep waiting.
    assert second["routes_version"] > first["routes_version"]
    assert second["applied_version"] < second["routes_version"]


def test_a_lane_without_the_current_replica_table_is_behind(tmp_path: Path) -> None:
    table = RoutePublisher("e")
    table.publish({"replicas": []})
    gateway = GatewaySupervisor(
        Home(tmp_path),
        "e",
        lambda: [_spec("app-a", "/", tmp_path)],
        lambda name: table if name == "app-a" else None,
    )
    assert gateway.status()["lanes_behind"] == ["app-a"]  # the lane never polled
    table.acknowledge(table.token, "consumer:gateway")
    assert gateway.status()["lanes_behind"] == []
    table.publish({"replicas": [1]})  # a replica became routable after the lane's poll
    assert gateway.lanes_behind(["app-a"]) == ["app-a"]
    table.acknowledge(table.token, "other-lb-worker")  # the service's own LB is not the gateway
    assert gateway.lanes_behind(["app-a"]) == ["app-a"]


def test_a_second_service_on_a_taken_prefix_is_refused_by_name() -> None:
    taken = {"app-Model": "/", "other": None}
    problem = prefix_conflict({"app1-Model1": "/"}, taken)
    assert problem == (
        "route_prefix '/' of service app1-Model1 is already served by service app-Model:"
        " give one of them another route_prefix (or take app-Model down)"
    )
    assert prefix_conflict({"app1-Model1": "/model1", "app1-x": None}, taken) is None
    # Two services of one deploy on one prefix are refused as well.
    assert prefix_conflict({"a": "/x", "b": "/x"}, {}) is not None
    # A service keeping its own prefix (an update) is no conflict.
    assert prefix_conflict({"app-Model": "/"}, {}) is None
