"""A per-accelerator target on a mixed machine (tests/helpers/fake_controller.py: the
real runtime, planner, autoscaler and SQLite on simulated time; the machine is an
Inventory value with one A100 and two V100s): the service is sized by the
capacity of the replicas it has, and scaling down stops the smaller ones first,
as SkyServe's instance-aware autoscaler does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import World, run

from steadyserve.controller.capacity import CapacityPool
from steadyserve.controller.routing import replica_accelerator
from steadyserve.core.capacity import Gpu, Inventory
from steadyserve.core.states import EventKind, ReplicaStatus

SERVICE: dict[str, Any] = {
    "readiness_probe": {"path": "/health", "initial_delay_seconds": 1},
    "health_check_period_s": 1,
    "graceful_shutdown_timeout_s": 2,
    "graceful_shutdown_wait_loop_s": 0.1,
    "load_balancing_policy": "instance_aware_least_load",
    "replica_policy": {
        "min_replicas": 1,
        "max_replicas": 3,
        "target_qps_per_replica": {"A100": 10, "V100": 5},
        "decision_interval_s": 1,
        "upscale_delay_seconds": 1,
        # Longer than the ramp of the 60 s window: a rising load does not first
        # lose the replicas it is about to need again.
        "downscale_delay_seconds": 30,
    },
}
# The V100 first: the first replicas land on the V100s, the A100 is the newest.
RESOURCES: dict[str, Any] = {"accelerators": ["V100:1", "A100:1"]}


def mixed_machine(world: World) -> None:
    inventory = Inventory(
        gpus=(
            Gpu(0, "GPU-0", "NVIDIA A100-SXM4-80GB"),
            Gpu(1, "GPU-1", "Tesla V100-SXM2-16GB"),
            Gpu(2, "GPU-2", "Tesla V100-SXM2-16GB"),
        )
    )
    world.runtime.capacity = CapacityPool(inventory, lambda: list(world.runtime.replicas.values()))


def live(world: World) -> dict[int, str | None]:
    """Live replica id -> the accelerator it is sized by."""
    spec = world.runtime.spec
    return {r.id: replica_accelerator(spec, r) for r in world.replicas() if r.status.is_live}


def test_a_mixed_fleet_scales_by_capacity_and_keeps_the_largest(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": SERVICE, "resources": RESOURCES})
    mixed_machine(world)
    sent = 0

    async def traffic(qps: int, seconds: int) -> None:
        """``qps`` requests a second, reported by the load balancer each second."""
        nonlocal sent
        for _ in range(seconds):
            sent += qps
            world.runtime.autoscaler.load.lb_report(world.clock.now(), {}, {1: sent}, lb_pid=1)
            await world.advance(1.0)

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        await world.until("1 ready", lambda: len(world.replicas(ReplicaStatus.READY)) == 1)
        assert live(world) == {1: "V100"}

        # 18 qps: V100 5 alone, then two V100s (10), then the A100 makes 20 > 18.
        await traffic(18, 90)
        assert live(world) == {1: "V100", 2: "V100", 3: "A100"}
        assert len(world.replicas(ReplicaStatus.READY)) == 3
        reasons = world.events(EventKind.AUTOSCALE)
        assert "qps 10.2 over 60 s / capacity 10 of 2 replicas -> 3 replicas" in reasons

        # 7 qps: the A100 alone carries it; the V100s go, not the newest (the A100).
        await traffic(7, 120)
        assert live(world) == {3: "A100"}
        assert world.runtime.target_replicas() == 1

    run(world, scenario)
