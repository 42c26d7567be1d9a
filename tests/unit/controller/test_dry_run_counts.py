"""``--dry-run``'s counts are what the update really does: for generated fleets and
specs (in place, rolling with any surge and unavailability, blue-green), the dry
run's ``launch``/``stop`` equal the replicas the runtime then launches and drains
while it carries the update out, on simulated time (tests/helpers/fake_controller.py),
and the plan the real update answers says the same as the dry run."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers.fake_controller import World, spec_of

from steadyserve.controller.updates import apply
from steadyserve.core.planner import ReplicaView
from steadyserve.core.states import ReplicaStatus, UpdateMode, UpdateStatus
from steadyserve.core.update_counts import update_counts

READY = ReplicaStatus.READY


def _fields(replicas: int, run: str, surge: int, unavailable: int, mode: str) -> dict[str, Any]:
    return {
        "run": run,
        "service": {
            "replicas": replicas,
            "readiness_probe": {"path": "/health", "initial_delay_seconds": 5},
            "health_check_period_s": 1,
            "update_deadline_s": 600,
            "graceful_shutdown_timeout_s": 1,
            "graceful_shutdown_wait_loop_s": 0.125,
            "update_mode": mode,
            "rolling_update": {"max_surge": surge, "max_unavailable": unavailable},
        },
    }


def _count(world: World, status: str) -> int:
    return len(world.events(status))


def _settled(world: World, version: int, target: int) -> bool:
    update = world.runtime.rollout.update
    rows = world.replicas()
    return (
        update is not None
        and update.status is UpdateStatus.SUCCEEDED
        and all(r.version == version and r.status is READY for r in rows)
        and len(rows) == target
    )


def _check(old: int, new: int, kind: str, surge: int, unavailable: int) -> None:
    mode = "rolling" if kind == "in_place" else kind
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        world = World(tmp_path, _fields(old, "serve", surge, unavailable, mode))
        controller = SimpleNamespace(store=world.store, home=world.home)
        # In place: a count or a probe setting changes; a restart: the command does.
        run = "serve" if kind == "in_place" else "serve --v2"
        period = {"health_check_period_s": 2} if kind == "in_place" and old == new else {}
        fields = _fields(new, run, surge, unavailable, mode)
        fields["service"].update(period)
        spec = spec_of(fields, tmp_path)

        async def scenario() -> None:
            world.probes.default = (True, "ok")  # every replica started turns READY
            await world.tick()
            await world.until(f"{old} ready", lambda: len(world.replicas(READY)) == old)
            launched, drained = _count(world, "PENDING"), _count(world, "SHUTTING_DOWN")
            args: dict[str, Any] = dict(mode=None, source_workdir=None, rollback_to=None)
            runtime = world.runtime
            dry = await apply(controller, runtime, spec, "", dry_run=True, **args)  # type: ignore[arg-type]
            real = await apply(controller, runtime, spec, "", dry_run=False, **args)  # type: ignore[arg-type]
            assert dry["mode"] == ("in_place" if kind == "in_place" else kind)
            assert (real["launch"], real["stop"]) == (dry["launch"], dry["stop"])
            version = real["version"]
            await world.until("the update done", lambda: _settled(world, version, new), 120.0)
            launched = _count(world, "PENDING") - launched
            drained = _count(world, "SHUTTING_DOWN") - drained
            assert (dry["launch"], dry["stop"]) == (launched, drained), world.describe()

        try:
            asyncio.run(scenario())
        finally:
            world.store.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    old=st.integers(1, 3),
    new=st.integers(1, 3),
    kind=st.sampled_from(["in_place", "rolling", "blue_green"]),
    limits=st.sampled_from([(1, 0), (0, 1), (2, 1), (1, 2), (3, 0)]),
)
def test_dry_run_counts_are_what_the_update_then_launches_and_drains(
    old: int, new: int, kind: str, limits: tuple[int, int]
) -> None:
    _check(old, new, kind, *limits)


def test_an_update_under_way_counts_the_replicas_of_every_version() -> None:
    """Relabelled in place, every live replica counts against the new target: the
    steady plan sizes them at once (launch the missing, drain the surplus)."""
    fleet = [ReplicaView(1, 1, READY), ReplicaView(2, 2, READY), ReplicaView(3, 2, READY)]
    assert update_counts(UpdateMode.IN_PLACE, 2, 3, fleet) == (0, 1)
    assert update_counts(UpdateMode.IN_PLACE, 5, 3, fleet) == (2, 0)
    for mode in (UpdateMode.ROLLING, UpdateMode.BLUE_GREEN, UpdateMode.CANARY):
        assert update_counts(mode, 2, 3, fleet) == (2, 3), mode
