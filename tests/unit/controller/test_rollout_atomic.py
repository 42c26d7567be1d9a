"""Each change of update state is one transaction: a controller that dies mid-way
(here: a write that raises) leaves all of it or none in the state database. The
real runtime and rollout on real SQLite (tests/helpers/fake_controller.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_controller import World, run

from steadyserve.core.states import EventKind, UpdateMode, UpdateStatus, VersionOutcome

SERVICE: dict[str, Any] = {"replicas": 1, "readiness_probe": {"path": "/health"}}


class Crash(Exception):
    pass


def crash_on(world: World, monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    """The store's write of the service's ``field`` raises, as a kill at that point."""
    real = world.store.set_service_fields

    def fields(name: str, **values: Any) -> None:
        if field in values:
            raise Crash(field)
        real(name, **values)

    monkeypatch.setattr(world.store, "set_service_fields", fields)


def test_an_update_that_cannot_take_its_target_version_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        spec = world.add_version(2, {"service": SERVICE, "run": "serve --v2"})
        crash_on(world, monkeypatch, "version")
        with pytest.raises(Crash):
            world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        # Neither an update in flight for a version that is not the target, nor its event.
        assert world.store.latest_update("svc") is None
        assert world.events(EventKind.UPDATE_STARTED) == []
        assert world.new_runtime().rollout.update is None

    run(world, scenario)


def test_an_update_that_succeeds_ends_with_its_outcomes_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        spec = world.add_version(2, {"service": SERVICE, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        crash_on(world, monkeypatch, "stable_version")
        with pytest.raises(Crash):
            world.runtime.rollout.finish(UpdateStatus.SUCCEEDED, "done")
        saved = world.store.latest_update("svc")
        assert saved is not None and saved.status is UpdateStatus.IN_PROGRESS
        assert saved.finished_at is None
        assert [v.outcome for v in world.store.versions("svc")] == [
            VersionOutcome.ACTIVE,
            VersionOutcome.IN_PROGRESS,
        ]
        assert world.events(EventKind.UPDATE_SUCCEEDED) == []

    run(world, scenario)
