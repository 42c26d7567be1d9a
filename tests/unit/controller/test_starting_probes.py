"""A starting replica is probed every 0.1 s however long it loads, so the first
request of a service at zero waits at most about that past readiness (a back-off to
``health_check_period_s`` added up to 10 s). Simulated time, the fake backend."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.fake_controller import World, run

from steadyserve.core.states import ReplicaStatus

FIELDS = {
    "service": {
        "replicas": 1,
        "readiness_probe": {"path": "/health", "initial_delay_seconds": 1200},
        "health_check_period_s": 10,  # SkyServe's default
    }
}


def test_a_replica_that_loads_for_minutes_is_ready_within_a_tenth_of_a_second(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await world.tick()
        await world.advance(95.0)  # the model loads; every probe is refused
        (replica,) = world.replicas()
        assert replica.status is ReplicaStatus.STARTING
        refused = world.probes.count
        assert refused >= 700  # every step of the simulated clock (0.125 s): no back-off
        world.answer_all(True)
        await world.advance(0.125)
        assert replica.status is ReplicaStatus.READY

    run(world, scenario)
