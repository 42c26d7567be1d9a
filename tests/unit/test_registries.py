"""One registry per concept, and every reader of it in step.

Update strategies (core/strategies/) and routing policies (core/routing/registry.py)
are each one registry: the spec accepts what it holds, the planner and the load
balancer build from it. The parity tests hold the readers to the registries; the toy
tests plug in a new strategy and a new policy the way docs/design.md ("Where to
change what") says, one module (tests/helpers/toy_*.py) and one registry line each,
and follow them through the spec, the planner (the real runtime on simulated time)
and the load balancer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_controller import STEP_S, World, run
from tests.helpers.toy_policy import LowestId
from tests.helpers.toy_strategy import Recreate

from steadyserve import backends
from steadyserve.backends.fake import FakeBackend
from steadyserve.core import strategies
from steadyserve.core.planner import ReplicaView
from steadyserve.core.routing import registry as routing
from steadyserve.core.states import ReplicaStatus, UpdateMode, UpdateStatus
from steadyserve.core.update_counts import update_counts
from steadyserve.home.paths import Home
from steadyserve.lb.__main__ import build_parser
from steadyserve.lb.balancer import Balancer
from steadyserve.spec import SpecError, parse_service
from steadyserve.wire.routes import ReplicaRoute, RouteTable

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "design.md"
READY = ReplicaStatus.READY


def spec_error(tmp_path: Path, service: dict[str, Any]) -> str | None:
    try:
        parse_service({"name": "s", "run": "x $PORT", "service": service}, base_dir=tmp_path)
    except SpecError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ parity


def test_the_spec_accepts_exactly_the_registered_routing_policies(tmp_path: Path) -> None:
    names = list(routing.POLICIES)
    assert names == [
        "least_load",
        "round_robin",
        "power_of_two",
        "instance_aware_least_load",
        "prefix_affinity",
        "session_affinity",
    ]
    for name in names:  # a name (some need more fields, which is another line)
        assert "must be one of" not in (spec_error(tmp_path, {"load_balancing_policy": name}) or "")
    error = spec_error(tmp_path, {"load_balancing_policy": "fastest"})
    assert error == f"service.load_balancing_policy: must be one of {', '.join(names)}"


def test_every_registered_policy_is_built_under_its_own_name() -> None:
    """The balancer rebuilds its policy when the table's name differs from the
    policy's: a factory that built another name would rebuild on every table."""
    for name in routing.POLICIES:
        assert routing.make_policy(name).name == name
    with pytest.raises(ValueError, match="expected one of"):
        routing.make_policy("fastest")


def test_the_route_table_the_lb_flag_and_the_reference_name_every_policy() -> None:
    reference = next(
        line
        for line in REFERENCE.read_text().splitlines()
        if "`service.load_balancing_policy`" in line
    )
    documented = re.findall(r"`(\w+)`", reference.split("|")[2])
    assert documented == list(routing.POLICIES)
    flag = next(a for a in build_parser()._actions if a.dest == "policy")
    assert list(flag.choices or ()) == sorted(routing.POLICIES)
    for name in routing.POLICIES:
        assert RouteTable.from_json(table("e", name, (1,)).to_json()).policy == name


def test_the_spec_accepts_exactly_the_selectable_update_strategies(tmp_path: Path) -> None:
    modes = strategies.selectable_modes()
    assert modes == ("rolling", "blue_green", "canary")
    for mode in modes:
        assert spec_error(tmp_path, {"update_mode": mode}) is None
    assert spec_error(tmp_path, {"update_mode": "in_place"}) == (
        "service.update_mode: must be one of rolling, blue_green, canary"
    )
    for mode, strategy in strategies.STRATEGIES.items():
        assert strategy.mode is mode and strategies.strategy_of(mode) is strategy


# -------------------------------------------------------------------- toys


@pytest.fixture
def recreate() -> Iterator[UpdateMode]:
    """The toy strategy, registered (one line) for this test only."""
    strategies.register(Recreate())
    try:
        yield Recreate.mode
    finally:
        strategies.STRATEGIES.pop(Recreate.mode)


@pytest.fixture
def lowest_id() -> Iterator[str]:
    """The toy policy, registered (one line) for this test only."""
    routing.register("lowest_id", lambda rng, options: LowestId())
    try:
        yield "lowest_id"
    finally:
        routing.POLICIES.pop("lowest_id")


def test_a_new_update_strategy_is_accepted_by_the_spec_and_the_planner(
    tmp_path: Path, recreate: UpdateMode
) -> None:
    assert spec_error(tmp_path, {"update_mode": "recreate"}) is None
    assert "recreate" in (spec_error(tmp_path, {"update_mode": "nope"}) or "")
    old = [ReplicaView(1, 1, READY), ReplicaView(2, 1, READY)]
    # The dry run plays the toy's own steps: both old drain, then two new start.
    assert update_counts(recreate, 2, 2, old) == (2, 2)


def test_a_new_update_strategy_runs_an_update_in_the_real_runtime(
    tmp_path: Path, recreate: UpdateMode
) -> None:
    common = {"readiness_probe": {"path": "/health"}, "health_check_period_s": 1}
    world = World(tmp_path, {"service": {**common, "replicas": 2}})
    both_versions_live = []

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("version 1 ready", lambda: len(ready(world, 1)) == 2)
        spec = world.add_version(
            2, {"service": {**common, "replicas": 2, "update_mode": "recreate"}, "run": "v2"}
        )
        update = world.runtime.rollout.begin(2, spec, recreate, "run changed")
        for _ in range(round(60 / STEP_S)):
            await world.advance(STEP_S)
            live = {r.version for r in world.replicas() if r.status.is_live}
            both_versions_live.append(live == {1, 2})
            if update.status is not UpdateStatus.IN_PROGRESS:
                break
        assert update.status is UpdateStatus.SUCCEEDED, (update.message, world.describe())
        assert update.mode is recreate
        assert len(ready(world, 2)) == 2 and not ready(world, 1)

    run(world, scenario)
    assert not any(both_versions_live), "recreate never runs both versions at once"


def ready(world: World, version: int) -> list[int]:
    return [r.id for r in world.replicas() if r.version == version and r.status is READY]


def table(epoch: str, policy: str, ids: tuple[int, ...], max_ongoing: int = 1) -> RouteTable:
    routes = tuple(ReplicaRoute(i, 1, "127.0.0.1", 9000 + i) for i in ids)
    return RouteTable(epoch, 1, policy, max_ongoing, -1, routes)


def test_a_new_routing_policy_is_accepted_by_the_spec_and_the_load_balancer(
    tmp_path: Path, lowest_id: str
) -> None:
    assert spec_error(tmp_path, {"load_balancing_policy": lowest_id}) is None
    # What the controller sends crosses the wire as JSON, and the LB builds the policy.
    wired = RouteTable.from_json(json.loads(json.dumps(table("e", lowest_id, (3, 1, 2)).to_json())))
    balancer = Balancer(wired)
    assert balancer.policy.name == lowest_id
    first, second = balancer.choose(None), balancer.choose(None)
    assert (first and first.id, second and second.id) == (1, 2)  # least_load would rotate
    assert first is not None
    balancer.release(first)
    assert (chosen := balancer.choose(None)) is not None and chosen.id == 1


def test_backends_are_chosen_from_one_registry(tmp_path: Path, monkeypatch: Any) -> None:
    assert backends.NAMES == ("local", "ray")
    with pytest.raises(backends.BackendChoiceError, match=r"'nope' \(use local or ray\)"):
        backends.backend_name({backends.BACKEND_ENV: "nope"})
    monkeypatch.setenv(backends.BACKEND_ENV, "fake")
    chosen = backends.choose_backend(Home(tmp_path))
    assert isinstance(chosen, FakeBackend) and chosen.places
