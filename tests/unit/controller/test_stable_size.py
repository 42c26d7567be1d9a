"""The stable version of a blue-green or canary update keeps the size it had when the
update started; only the new version is launched to the new target. The real runtime,
rollout and canary driver, real SQLite, the fake backend on simulated time
(tests/helpers/fake_controller.py), recording the live replicas per version on
every step of the update."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import STEP_S, World, run

from steadyserve.core.canary.steps import Phase
from steadyserve.core.states import ReplicaStatus, UpdateMode, UpdateStatus

READY = ReplicaStatus.READY
COMMON: dict[str, Any] = {
    "readiness_probe": {"path": "/health", "initial_delay_seconds": 1},
    "health_check_period_s": 1,
    "graceful_shutdown_timeout_s": 2,
    "graceful_shutdown_wait_loop_s": 0.1,
    # The canary waits at 50% for steady promote: its own pauses run on the wall clock.
    "canary": {"steps": [{"weight": 50}, {"pause": {}}, {"weight": 100}]},
}
OLD: dict[str, Any] = {**COMMON, "replicas": 2}
NEW: dict[str, Any] = {**COMMON, "replica_policy": {"min_replicas": 5, "max_replicas": 5}}


def counts(world: World) -> tuple[int, int, int]:
    """(live version 1, live version 2, READY version 2) now."""
    live = [r for r in world.replicas() if r.status.is_live]
    return (
        sum(1 for r in live if r.version == 1),
        sum(1 for r in live if r.version == 2),
        sum(1 for r in live if r.version == 2 and r.status is READY),
    )


def update_from_2_to_5(tmp_path: Path, mode: UpdateMode) -> list[tuple[int, int, int]]:
    """Version 1 on 2 fixed replicas, then an update to 5 in ``mode``, to its end:
    the counts after every simulated step."""
    world = World(tmp_path, {"service": OLD})
    timeline: list[tuple[int, int, int]] = []

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("version 1 ready", lambda: counts(world)[0] == 2)
        spec = world.add_version(2, {"service": NEW, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, mode, "run changed")
        update = world.runtime.rollout.update
        assert update is not None and update.stable_replicas == 2
        for _ in range(round(60 / STEP_S)):
            await world.advance(STEP_S)
            timeline.append(counts(world))
            canary = world.runtime.canary.state
            if canary is not None and canary.phase is Phase.WAITING and canary.step == 1:
                world.runtime.canary.command("promote")
            if update.status is not UpdateStatus.IN_PROGRESS:
                break
        assert update.status is UpdateStatus.SUCCEEDED, (update.message, world.describe())

    run(world, scenario)
    return timeline


def test_blue_green_from_2_to_5_never_grows_the_old_version(tmp_path: Path) -> None:
    timeline = update_from_2_to_5(tmp_path, UpdateMode.BLUE_GREEN)
    assert max(old for old, _, _ in timeline) == 2, timeline
    # The new version is launched to its own target, and is all that is left.
    assert max(new for _, new, _ in timeline) == 5
    assert timeline[-1] == (0, 5, 5), timeline
    # The old version served (2 live) until the new one had its 5 READY.
    switch = next(i for i, (_, _, ready) in enumerate(timeline) if ready == 5)
    assert all(old == 2 for old, _, _ in timeline[:switch]), timeline


def test_canary_from_2_to_5_never_grows_the_old_version(tmp_path: Path) -> None:
    timeline = update_from_2_to_5(tmp_path, UpdateMode.CANARY)
    assert max(old for old, _, _ in timeline) == 2, timeline
    # 50% of the new target is 3 replicas, then all 5.
    assert any(ready == 3 and old == 2 for old, _, ready in timeline), timeline
    assert timeline[-1] == (0, 5, 5), timeline


def test_a_stable_replica_lost_before_the_switch_is_replaced_up_to_the_old_size(
    tmp_path: Path,
) -> None:
    """Healing still works, to the size the stable version had (2), not the new 5."""
    world = World(tmp_path, {"service": OLD})
    blue_green = {**NEW, "blue_green": {"auto_promote": False}}

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("version 1 ready", lambda: counts(world)[0] == 2)
        spec = world.add_version(2, {"service": blue_green, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.BLUE_GREEN, "run changed")
        await world.until("5 new READY, held for promote", lambda: counts(world)[2] == 5)
        victim = next(r for r in world.replicas(READY) if r.version == 1)
        world.process(victim).exit(137)
        await world.tick()
        await world.until(
            "the old version whole again",
            lambda: sum(1 for r in world.replicas(READY) if r.version == 1) == 2,
        )
        await world.advance(2.0)
        assert counts(world) == (2, 5, 5), world.describe()

    run(world, scenario)


def test_a_restarted_controller_keeps_the_stable_size(tmp_path: Path) -> None:
    """The size is in the update row: a new runtime over the same store reads it."""
    world = World(tmp_path, {"service": OLD})

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("version 1 ready", lambda: counts(world)[0] == 2)
        spec = world.add_version(2, {"service": NEW, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.BLUE_GREEN, "run changed")
        world.runtime = world.new_runtime()
        assert world.runtime.rollout.stable_target() == 2

    run(world, scenario)
