"""The runtime on a simulated GPU machine (tests/helpers/fake_controller.py: the real
runtime, rollout, canary driver and SQLite; the fake backend on simulated time):
the autoscaler's target is capped at what fits, with an event, and a canary on
a full machine takes stable places one at a time without ever oversubscribing a
GPU. No GPU exists here: the machine is an Inventory value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import STEP_S, World, run

from steadyserve.controller.capacity import CapacityPool
from steadyserve.core.canary.steps import Phase
from steadyserve.core.capacity import Assignment, Gpu, Inventory
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode, UpdateStatus

COMMON: dict[str, Any] = {
    "readiness_probe": {"path": "/health", "initial_delay_seconds": 1},
    "health_check_period_s": 1,
    "graceful_shutdown_timeout_s": 2,
    "graceful_shutdown_wait_loop_s": 0.1,
}
A100x2: dict[str, Any] = {"accelerators": "A100:2"}


def on_gpus(world: World, count: int) -> None:
    inventory = Inventory(
        gpus=tuple(Gpu(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB") for i in range(count))
    )
    world.runtime.capacity = CapacityPool(inventory, lambda: list(world.runtime.replicas.values()))


def held_gpus(world: World) -> list[int]:
    """Every GPU held now by a replica with a process (or about to have one)."""
    out: list[int] = []
    for r in world.replicas():
        if r.status.is_live or r.status is ReplicaStatus.SHUTTING_DOWN:
            got = Assignment.from_json(r.assignment)
            out.extend(got.gpus if got else ())
    return out


def test_autoscaler_target_is_capped_at_what_fits_with_an_event(tmp_path: Path) -> None:
    policy = {
        "min_replicas": 1,
        "max_replicas": 6,
        "initial_replicas": 4,
        "target_ongoing_requests": 1,
    }
    world = World(tmp_path, {"service": {**COMMON, "replica_policy": policy}, "resources": A100x2})
    on_gpus(world, 6)

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("3 ready", lambda: len(world.replicas(ReplicaStatus.READY)) == 3)
        assert world.runtime.target_replicas() == 3
        assert len(world.replicas()) == 3  # none left PENDING for ever
        assert sorted(held_gpus(world)) == [0, 1, 2, 3, 4, 5]
        capped = [r for r in world.events(EventKind.AUTOSCALE) if "capped" in r]
        assert capped == [
            "target 4 capped at 3: what fits on this machine"
            " (Insufficient nvidia.com/gpu: needs A100:2 (A100: 0 of 6 free))"
        ]

    run(world, scenario)


def test_canary_on_a_full_machine_takes_stable_places_one_at_a_time(tmp_path: Path) -> None:
    steps = [{"weight": 50}, {"pause": {}}, {"weight": 100}]
    service = {**COMMON, "replicas": 2, "canary": {"steps": steps}}
    world = World(tmp_path, {"service": service, "resources": A100x2})
    on_gpus(world, 4)

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("2 ready", lambda: len(world.replicas(ReplicaStatus.READY)) == 2)
        spec = world.add_version(2, {"service": service, "resources": A100x2, "run": "serve 2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.CANARY, "run changed")
        update = world.runtime.rollout.update
        assert update is not None
        fewest_routed = 2
        for _ in range(round(60 / STEP_S)):
            await world.advance(STEP_S)
            gpus = held_gpus(world)
            assert len(gpus) == len(set(gpus)) <= 4, world.describe()
            fewest_routed = min(fewest_routed, len(world.routed()))
            canary = world.runtime.canary.state
            if canary is not None and canary.phase is Phase.WAITING:
                # At 50%: one stable replica gave its place to one canary replica.
                live = [r for r in world.replicas() if r.status.is_live]
                assert sorted(r.version for r in live) == [1, 2]
                world.runtime.canary.command("promote")
            if update.status is not UpdateStatus.IN_PROGRESS:
                break
        assert update.status is UpdateStatus.SUCCEEDED, world.describe()
        assert fewest_routed >= 1
        notes = world.events(EventKind.CAPACITY)
        assert notes and "each takes a stable replica's place" in notes[0]

    run(world, scenario)
