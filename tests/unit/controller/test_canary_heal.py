"""A stable replica lost during a canary (or before a blue-green switch) is replaced
with the stable version while the update goes on: the real runtime, rollout and
canary driver, real SQLite, the fake backend on simulated time
(tests/helpers/fake_controller.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import World, run

from steadyserve.core.canary.steps import Phase
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode, UpdateStatus

READY = ReplicaStatus.READY
SERVICE: dict[str, Any] = {
    "replicas": 2,
    "readiness_probe": {"path": "/health", "initial_delay_seconds": 5},
    "health_check_period_s": 1,
    "graceful_shutdown_timeout_s": 2,
    "graceful_shutdown_wait_loop_s": 0.1,
    # 50% of 2 replicas is one new replica; then the canary waits for steady promote.
    "canary": {"steps": [{"weight": 50}, {"pause": {}}, {"weight": 100}]},
    "blue_green": {"auto_promote": False},
}


def live(world: World, version: int) -> list[int]:
    return [r.id for r in world.replicas() if r.status.is_live and r.version == version]


def ready(world: World, version: int) -> list[int]:
    return [r.id for r in world.replicas(READY) if r.version == version]


async def serving_v1_then_updating(
    world: World, mode: UpdateMode, *, crash_before: bool = False
) -> None:
    """Version 1 READY on 2 replicas (one of them a replacement, its failed
    predecessor still listed, if ``crash_before``), then an update to version 2."""
    world.probes.default = (True, "ok")
    await world.until("version 1 ready", lambda: len(ready(world, 1)) == 2)
    if crash_before:
        world.process(world.replicas(READY)[0]).exit(137)
        await world.tick()
        await world.until("version 1 whole again", lambda: len(ready(world, 1)) == 2)
    spec = world.add_version(2, {"service": SERVICE, "run": "serve --v2"})
    world.runtime.rollout.begin(2, spec, mode, "run changed")


async def canary_waiting(world: World) -> Any:
    """The runtime's canary, once it waits at its step."""
    canary = world.runtime.canary
    await world.until(
        "the canary waiting",
        lambda: canary.state is not None and canary.state.phase is Phase.WAITING,
    )
    return canary


def test_a_stable_replica_that_dies_mid_canary_is_replaced_with_the_stable_version(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        await serving_v1_then_updating(world, UpdateMode.CANARY, crash_before=True)
        canary = world.runtime.canary
        await world.until(
            "the canary waiting for promote at 50%",
            lambda: canary.state is not None and canary.state.phase is Phase.WAITING,
        )
        assert canary.state is not None and canary.state.weight == 50
        stable = ready(world, 1)
        assert len(stable) == 2 and len(ready(world, 2)) == 1

        victim = world.runtime.replicas[stable[0]]
        world.process(victim).exit(137)  # SIGKILL
        await world.tick()
        assert victim.status is ReplicaStatus.FAILED
        await world.until("a stable replacement READY", lambda: len(ready(world, 1)) == 2)

        replacement = max(ready(world, 1))
        assert replacement > max(stable)  # a new replica, of the stable version
        assert live(world, 1) == [stable[1], replacement]
        await world.tick()  # the next plan routes it, at the stable version's weight
        assert set(world.routed()) == {stable[1], replacement, *ready(world, 2)}
        assert world.runtime.routes.table["weights"] == {"2": 50, "1": 50}
        assert [e for e in world.events(EventKind.CANARY_STEP) if "stable replica" in e] == [
            f"stable replica {victim.id} failed during the canary; replacing it with version 1"
        ]
        # The canary did not move: same step, same weight, same new replicas.
        assert canary.state is not None and canary.state.phase is Phase.WAITING
        assert canary.state.weight == 50 and len(live(world, 2)) == 1
        assert world.runtime.rollout.failures == 0  # a stable failure is not the canary's
        await world.advance(3)
        assert len(live(world, 1)) == 2  # exactly one replacement, no more

        # Promote: the update completes and every version 1 replica drains, the
        # replacement with the others.
        canary.command("promote")
        await world.until(
            "the update succeeded",
            lambda: (
                world.runtime.rollout.update is not None
                and world.runtime.rollout.update.status is UpdateStatus.SUCCEEDED
            ),
        )
        await world.advance(3)
        assert live(world, 1) == [] and len(ready(world, 2)) == 2

    run(world, scenario)


def test_a_stable_replica_gone_while_the_controller_was_down_is_replaced_on_resume(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        await serving_v1_then_updating(world, UpdateMode.CANARY)
        await canary_waiting(world)
        await world.runtime.detach()  # the controller stops; replicas keep running
        victim = world.runtime.replicas[ready(world, 1)[0]]
        world.process(victim).exit(-9)  # dies while no controller watches
        world.runtime = world.new_runtime()
        world.runtime.resume()
        await world.tick()
        await world.until("a stable replacement READY", lambda: len(ready(world, 1)) == 2)
        resumed = world.runtime.canary.state
        assert resumed is not None and (resumed.phase, resumed.weight) == (Phase.WAITING, 50)
        assert len(live(world, 2)) == 1
        assert [e for e in world.events(EventKind.CANARY_STEP) if "stable replica" in e] == [
            f"stable replica {victim.id} failed during the canary; replacing it with version 1"
        ]

    run(world, scenario)


def test_no_stable_replacement_once_the_canary_is_aborted_or_complete(tmp_path: Path) -> None:
    """After an abort the steady plan owns version 1 again (its own replacement, no
    canary event); the canary launches nothing of version 1 itself."""
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        await serving_v1_then_updating(world, UpdateMode.CANARY)
        canary = await canary_waiting(world)
        canary.command("abort")
        victim = world.runtime.replicas[ready(world, 1)[0]]
        world.process(victim).exit(137)
        await world.until("version 1 whole again", lambda: len(ready(world, 1)) == 2)
        assert not [e for e in world.events(EventKind.CANARY_STEP) if "stable replica" in e]

    run(world, scenario)


def test_a_stable_replica_that_dies_before_a_blue_green_switch_is_replaced(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        await serving_v1_then_updating(world, UpdateMode.BLUE_GREEN)
        await world.until("every new replica READY", lambda: len(ready(world, 2)) == 2)
        stable = ready(world, 1)
        assert set(world.routed()) >= set(stable)  # waiting for steady promote
        victim = world.runtime.replicas[stable[0]]
        world.process(victim).exit(137)
        await world.tick()
        await world.until("a stable replacement READY", lambda: len(ready(world, 1)) == 2)
        assert len(live(world, 1)) == 2 and len(live(world, 2)) == 2
        assert [e for e in world.events(EventKind.BLUE_GREEN) if "stable replica" in e] == [
            f"stable replica {victim.id} failed before the switch; replacing it with version 1"
        ]

    run(world, scenario)


def test_an_aborted_canary_serves_no_client_while_the_stable_version_heals(
    tmp_path: Path,
) -> None:
    """The simulator's seed 497: a canary aborted while its stable version was below
    its target (a stable replica lost) kept its READY replicas routed by the rolling
    rule that converges leftovers, until the stable version was whole again: clients
    got the version a verdict had just failed (at a shadow step's weight 0, one no
    client had ever reached). Its weight goes to 0 and its replicas drain at once."""
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        await serving_v1_then_updating(world, UpdateMode.CANARY)
        canary = await canary_waiting(world)
        assert len(ready(world, 2)) == 1
        world.answer_all(True)
        world.probes.default = (False, "connection refused")  # a replacement starts slowly
        victim = world.runtime.replicas[ready(world, 1)[0]]
        world.process(victim).exit(137)
        await world.advance(1)
        assert len(ready(world, 1)) == 1  # below its target of 2, a replacement starting
        canary.command("abort")
        await world.tick()
        assert set(world.routed()) == set(ready(world, 1))
        assert live(world, 2) == []
        world.probes.default = (True, "ok")
        await world.until("version 1 whole again", lambda: len(ready(world, 1)) == 2)
        assert set(world.routed()) == set(ready(world, 1))

    run(world, scenario)


def test_an_aborted_canary_keeps_serving_while_no_stable_replica_is_ready(
    tmp_path: Path,
) -> None:
    """The other side of the test above: with no READY stable replica, draining the
    aborted canary at once would leave nothing serving; the rolling rule keeps it
    until a stable replica is READY."""
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        await serving_v1_then_updating(world, UpdateMode.CANARY)
        canary = await canary_waiting(world)
        canaries = ready(world, 2)
        world.answer_all(True)
        world.probes.default = (False, "connection refused")
        for replica in [world.runtime.replicas[i] for i in ready(world, 1)]:
            world.process(replica).exit(137)
        await world.advance(1)
        assert ready(world, 1) == []
        canary.command("abort")
        await world.tick()
        assert world.routed() == canaries
        world.probes.default = (True, "ok")
        await world.until("a version 1 replica READY", lambda: bool(ready(world, 1)))
        await world.until("the canary drained", lambda: live(world, 2) == [])
        assert set(world.routed()) == set(ready(world, 1))

    run(world, scenario)
