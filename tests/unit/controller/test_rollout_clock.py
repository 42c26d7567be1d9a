"""The rollout's timing on simulated time (tests/helpers/fake_controller.py): a
canary's timed pause ends at its deadline and not a tick before, ``steady pause``
of a rolling update moves the update deadline by the time held, and a blue-green
update switches the tick its green set is READY and drains the blue one after
``scale_down_delay_s``. The real runtime, rollout and SQLite; no sleeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import World, run

from steadyserve.controller.progressive import carry_out
from steadyserve.core.canary.steps import Phase
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode, UpdateStatus

READY = ReplicaStatus.READY
BASE: dict[str, Any] = {
    "replicas": 2,
    "readiness_probe": {"path": "/health", "initial_delay_seconds": 5},
    "health_check_period_s": 1,
    "graceful_shutdown_timeout_s": 2,
    "graceful_shutdown_wait_loop_s": 0.1,
}
# A binary fraction: clock steps below and above a deadline add up exactly.
EPS = 0.125


def ready(world: World, version: int) -> list[int]:
    return [r.id for r in world.replicas(READY) if r.version == version]


def live(world: World, version: int) -> list[int]:
    return [r.id for r in world.replicas() if r.status.is_live and r.version == version]


def status(world: World) -> UpdateStatus:
    update = world.runtime.rollout.update
    assert update is not None
    return update.status


async def serving_v1(world: World) -> None:
    """Version 1 READY on 2 replicas; replicas started later refuse until answered."""
    world.probes.default = (True, "ok")
    await world.until("version 1 ready", lambda: len(ready(world, 1)) == 2)
    world.answer_all(True)
    world.probes.default = (False, "connection refused")


async def at(world: World, when: float) -> None:
    """Move the clock to ``when`` in one jump, then tick once."""
    world.clock.advance(when - world.clock.now())
    await world.settle()
    await world.tick()


def test_a_canary_pause_ends_exactly_at_its_deadline_not_before(tmp_path: Path) -> None:
    service = {**BASE, "canary": {"steps": [{"weight": 50}, {"pause": 10}, {"weight": 100}]}}
    world = World(tmp_path, {"service": service})

    async def scenario() -> None:
        await serving_v1(world)
        spec = world.add_version(2, {"service": service, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.CANARY, "run changed")
        canary = world.runtime.canary
        await world.tick()
        world.answer_all(True)  # the canary's one new replica gets ready
        await world.until(
            "the canary at its pause step",
            lambda: canary.state is not None and canary.state.step == 1,
        )
        state = canary.state
        assert state is not None and state.weight == 50 and state.phase is Phase.RUNNING
        deadline = state.step_started + 10
        await at(world, deadline - EPS)
        assert canary.state is not None and canary.state.step == 1  # still pausing
        assert canary.status_json() is not None
        assert canary.status_json()["pause_left_s"] == 0.1  # type: ignore[index]
        await at(world, deadline)
        assert canary.state is not None and canary.state.step == 2
        assert canary.state.weight == 100 and canary.state.step_started == deadline
        assert any(e.startswith("step 3/3") for e in world.events(EventKind.CANARY_STEP))

    run(world, scenario)


def test_pause_and_resume_move_the_update_deadline_by_the_time_held(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": {**BASE, "update_deadline_s": 20}})

    async def scenario() -> None:
        await serving_v1(world)
        # The new replicas never get ready and never fail (their initial delay is long).
        slow = {
            **BASE,
            "update_deadline_s": 20,
            "readiness_probe": {"path": "/health", "initial_delay_seconds": 1000},
        }
        spec = world.add_version(2, {"service": slow, "run": "slow"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        update = world.runtime.rollout.update
        assert update is not None
        started = update.started_at
        await at(world, started + 5)
        assert carry_out(world.runtime, "pause").startswith("rolling update paused")
        await at(world, started + 35)  # held 30 s: past the unheld deadline, still going
        assert update.status is UpdateStatus.IN_PROGRESS
        assert world.runtime.rollout.holds.paused_seconds() == 30
        assert carry_out(world.runtime, "resume") == "rolling update resumed"
        # A restarted controller reads the same hold from the state database.
        assert world.new_runtime().rollout.holds.paused_seconds() == 30
        await at(world, started + 20 + 30)  # the deadline moved by exactly the time held
        assert status(world) is UpdateStatus.IN_PROGRESS
        await at(world, started + 20 + 30 + EPS)
        assert status(world) is UpdateStatus.FAILED
        assert update.message.startswith("not done within update_deadline_s=20")

    run(world, scenario)


def test_blue_green_switches_when_green_is_ready_and_drains_blue_after_its_delay(
    tmp_path: Path,
) -> None:
    service = {**BASE, "blue_green": {"scale_down_delay_s": 5}}
    world = World(tmp_path, {"service": service})

    async def scenario() -> None:
        await serving_v1(world)
        blue = ready(world, 1)
        spec = world.add_version(2, {"service": service, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.BLUE_GREEN, "run changed")
        await world.until(
            "the green set started",
            lambda: len([r for r in world.replicas() if r.version == 2 and r.pid]) == 2,
        )
        green = live(world, 2)
        first = world.process(world.runtime.replicas[green[0]])
        world.probes.answers[first.port] = (True, "ok")  # the other one still refuses
        await world.until("one green replica READY", lambda: len(ready(world, 2)) == 1)
        await world.advance(2)
        # Half the green set is not a switch: blue takes all traffic.
        assert set(world.routed()) == set(blue)
        assert world.events(EventKind.BLUE_GREEN) == []
        world.answer_all(True)
        await world.until("the green set READY", lambda: len(ready(world, 2)) == 2)
        # The switch is the tick green is whole: routed to green at once, blue kept warm.
        switched = world.clock.now()
        assert set(world.routed()) == set(green)
        assert world.events(EventKind.BLUE_GREEN) == [
            "switched to version 2; version kept warm 5s for steady abort"
        ]
        update = world.runtime.rollout.update
        assert update is not None and update.id is not None
        assert world.runtime.rollout.table.switch(update.id) == (False, switched)  # persisted
        await at(world, switched + 5 - EPS)
        assert live(world, 1) == blue  # warm, out of routing, not draining yet
        await at(world, switched + 5)
        assert all(world.runtime.replicas[r].status is ReplicaStatus.SHUTTING_DOWN for r in blue)
        await world.until(
            "the update succeeded",
            lambda: (
                world.runtime.rollout.update is not None
                and world.runtime.rollout.update.status is UpdateStatus.SUCCEEDED
            ),
        )

    run(world, scenario)
