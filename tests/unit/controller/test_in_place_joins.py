"""An in-place change that arrives while a restart update runs joins it
(docs/behaviour.md): the restart's target version then ends with the outcome the
update reaches, never left ``in progress``. The real runtime and rollout on
simulated time and real SQLite (tests/helpers/fake_controller.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_controller import World, run

import steadyserve.controller.rollout.in_place as in_place
from steadyserve.core.states import ReplicaStatus, UpdateMode, UpdateStatus, VersionOutcome

SERVICE: dict[str, Any] = {
    "replicas": 2,
    "readiness_probe": {"path": "/health"},
    "health_check_period_s": 1,
    "update_deadline_s": 60,
    "graceful_shutdown_timeout_s": 1,
    "graceful_shutdown_wait_loop_s": 0.1,
    "reconfigure_path": "/reconfigure",
}
V1: dict[str, Any] = {"service": {**SERVICE, "user_config": {"level": 1}}}
V2: dict[str, Any] = {**V1, "run": "serve --v2"}
V3: dict[str, Any] = {**V2, "service": {**SERVICE, "user_config": {"level": 2}}}
O = VersionOutcome  # noqa: E741


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every replica takes ``user_config`` unless its port is in the returned list."""
    ports: list[int] = []

    async def post(
        session: Any, host: str, port: int, path: str, config: Any, **_: Any
    ) -> tuple[bool, bool, str]:
        return (False, True, "answered 500") if port in ports else (True, True, "")

    monkeypatch.setattr(in_place, "post_user_config", post)
    return ports


def outcomes(world: World) -> list[VersionOutcome]:
    return [v.outcome for v in world.store.versions("svc")]


def update_status(world: World) -> UpdateStatus | None:
    update = world.runtime.rollout.update
    return None if update is None else update.status


async def joined(world: World) -> None:
    """Version 1 serving; a rolling update to 2 under way (its first new replica is
    starting, not ready); then an in-place change to 3 joins it."""
    world.probes.default = (True, "ok")
    await world.until("2 ready", lambda: len(world.replicas(ReplicaStatus.READY)) == 2)
    world.probes.default = (False, "connection refused")
    world.answer_all(True)
    spec2 = world.add_version(2, V2)
    world.runtime.rollout.begin(2, spec2, UpdateMode.ROLLING, "run changed")
    await world.until("a version-2 replica", lambda: any(r.version == 2 for r in world.replicas()))
    spec3 = world.add_version(3, V3, UpdateMode.IN_PLACE)
    update = world.runtime.rollout.begin(3, spec3, UpdateMode.IN_PLACE, "user_config changed")
    assert update.mode is UpdateMode.ROLLING and update.to_version == 3  # joined, not new
    await world.settle()
    assert update_status(world) is UpdateStatus.IN_PROGRESS
    assert outcomes(world) == [O.ACTIVE, O.IN_PROGRESS, O.IN_PROGRESS]


def test_a_joined_update_that_succeeds_retires_the_restarts_version(
    tmp_path: Path, refused: list[int]
) -> None:
    world = World(tmp_path, V1)

    async def scenario() -> None:
        await joined(world)
        world.probes.default = (True, "ok")
        await world.until("succeeded", lambda: update_status(world) is UpdateStatus.SUCCEEDED)
        assert world.runtime.row.stable_version == 3
        assert outcomes(world) == [O.RETIRED, O.RETIRED, O.ACTIVE]
        # The same after a restart of the controller (the rows, not memory).
        assert [v.outcome for v in world.new_runtime().store.versions("svc")] == outcomes(world)

    run(world, scenario)


def test_a_joined_update_that_fails_fails_both_versions(tmp_path: Path, refused: list[int]) -> None:
    world = World(tmp_path, V1)

    async def scenario() -> None:
        await joined(world)
        world.runtime.rollout.roll_back("aborted by steady abort")
        assert update_status(world) is UpdateStatus.FAILED
        assert world.runtime.row.version == 1
        assert outcomes(world) == [O.ACTIVE, O.FAILED, O.FAILED]

    run(world, scenario)


def test_a_joined_update_that_is_superseded_supersedes_both_versions(
    tmp_path: Path, refused: list[int]
) -> None:
    world = World(tmp_path, V1)

    async def scenario() -> None:
        await joined(world)
        spec4 = world.add_version(4, {**V3, "run": "serve --v4"})
        world.runtime.rollout.begin(4, spec4, UpdateMode.ROLLING, "run changed")
        assert outcomes(world) == [O.ACTIVE, O.SUPERSEDED, O.SUPERSEDED, O.IN_PROGRESS]

    run(world, scenario)


def test_a_refused_config_that_joined_leaves_the_restart_going_to_its_version(
    tmp_path: Path, refused: list[int]
) -> None:
    """The in-place change fails and is reverted; the restart it joined carries on
    to its own version, which ends as the update does."""
    world = World(tmp_path, V1)

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("2 ready", lambda: len(world.replicas(ReplicaStatus.READY)) == 2)
        world.answer_all(True)
        spec2 = world.add_version(2, V2)
        world.runtime.rollout.begin(2, spec2, UpdateMode.ROLLING, "run changed")
        # The first version-2 replica is ready (the next one is not), and refuses
        # the next config.
        await world.until(
            "a ready version-2 replica",
            lambda: any(r.version == 2 for r in world.replicas(ReplicaStatus.READY)),
        )
        world.answer_all(True)
        world.probes.default = (False, "connection refused")
        assert update_status(world) is UpdateStatus.IN_PROGRESS
        refused.extend(r.port for r in world.replicas() if r.version == 2 and r.port)
        spec3 = world.add_version(3, V3, UpdateMode.IN_PLACE)
        world.runtime.rollout.begin(3, spec3, UpdateMode.IN_PLACE, "user_config changed")
        await world.settle()
        assert world.runtime.row.version == 2
        assert update_status(world) is UpdateStatus.IN_PROGRESS
        assert outcomes(world) == [O.ACTIVE, O.IN_PROGRESS, O.FAILED]
        world.probes.default = (True, "ok")
        world.answer_all(True)
        await world.until("succeeded", lambda: update_status(world) is UpdateStatus.SUCCEEDED)
        assert outcomes(world) == [O.RETIRED, O.ACTIVE, O.FAILED]

    run(world, scenario)
