"""A crash loop during a long update does not grow the replica list without bound:
the newest three failed rows of each version stay listed (why it fails), older
ones are forgotten, in memory and in SQLite. The real runtime, rollout and canary
driver on the fake backend and simulated time (tests/helpers/fake_controller.py)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.fake_controller import World, run
from tests.unit.controller.test_canary_heal import (
    SERVICE,
    canary_waiting,
    ready,
    serving_v1_then_updating,
)

from steadyserve.core.planner import KEEP_FAILED, ReplicaView, failed_to_forget
from steadyserve.core.states import ReplicaStatus, UpdateMode

CRASHES = 7


def failed(world: World, version: int) -> list[int]:
    return [r.id for r in world.replicas() if r.status.is_failed and r.version == version]


def test_stable_replicas_crashing_through_a_canary_keep_three_failed_rows(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {"service": SERVICE})

    async def scenario() -> None:
        await serving_v1_then_updating(world, UpdateMode.CANARY)
        await canary_waiting(world)  # held at 50% until promoted: a long update
        crashed: list[int] = []
        for _ in range(CRASHES):
            victim = world.runtime.replicas[ready(world, 1)[0]]
            crashed.append(victim.id)
            world.process(victim).exit(137)
            await world.tick()
            await world.until("the stable version whole again", lambda: len(ready(world, 1)) == 2)
            await world.tick()
        assert world.runtime.rollout.updating
        assert failed(world, 1) == crashed[-KEEP_FAILED:]  # the newest, in order
        stored = world.store.replicas("svc")
        assert sorted(r.id for r in stored if r.status.is_failed) == crashed[-KEEP_FAILED:]

    run(world, scenario)


def test_outside_an_update_other_versions_failed_rows_go() -> None:
    """The steady rule is unchanged: another version's failed rows are forgotten,
    and the current version keeps its newest three."""
    rows = [
        ReplicaView(1, 1, ReplicaStatus.FAILED),
        ReplicaView(2, 2, ReplicaStatus.FAILED_PROBING),
        ReplicaView(3, 2, ReplicaStatus.FAILED),
        ReplicaView(4, 2, ReplicaStatus.FAILED_INITIAL_DELAY),
        ReplicaView(5, 2, ReplicaStatus.FAILED),
        ReplicaView(6, 2, ReplicaStatus.READY),
        ReplicaView(7, 1, ReplicaStatus.FAILED),
    ]
    assert sorted(failed_to_forget(rows, 2)) == [1, 2, 7]
    assert sorted(failed_to_forget(rows, 2, updating=True)) == [2]
