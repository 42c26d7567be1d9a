"""A leaving replica lives until the load balancer's last in-flight request on it ends
(a long LLM stream), bounded by ``drain_timeout_s``, not by the seconds of
``graceful_shutdown_timeout_s``; scale-down stops the idle replicas first; status
shows what a drain still waits for. Simulated time, the fake backend, real SQLite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import World, run

from steadyserve.controller.status import draining_json
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode, UpdateStatus

FIELDS: dict[str, Any] = {
    "service": {
        "replicas": 2,
        "readiness_probe": {"path": "/health", "initial_delay_seconds": 5},
        "health_check_period_s": 1,
        "graceful_shutdown_timeout_s": 2,
        "graceful_shutdown_wait_loop_s": 0.25,
        "drain_timeout_s": 60,
    }
}
READY = ReplicaStatus.READY
WORKER = "lb-1"


async def serving(world: World, count: int = 2) -> None:
    world.probes.default = (True, "ok")
    await world.tick()
    await world.until(f"{count} ready", lambda: len(world.replicas(READY)) == count)


def lb_reports(world: World, in_flight: dict[int, int]) -> None:
    """One load-balancer worker acknowledges the current table and reports ``in_flight``."""
    routes = world.runtime.routes
    routes.acknowledge(routes.token, WORKER)
    routes.report(routes.token, dict(in_flight), {}, 0, {"worker": WORKER})


def test_an_update_succeeds_while_old_replicas_finish_their_streams(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        old = [r.id for r in world.replicas()]
        lb_reports(world, {old[0]: 1, old[1]: 0})  # one stream on the first old replica
        spec = world.add_version(2, {**FIELDS, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")

        def done() -> bool:
            update = world.runtime.rollout.update
            lb_reports(world, {old[0]: 1})
            return update is not None and update.status is UpdateStatus.SUCCEEDED

        await world.until("the update succeeded", done)
        # Ten times graceful_shutdown_timeout_s later the stream still flows.
        for _ in range(20):
            lb_reports(world, {old[0]: 1})
            await world.advance(1)
        draining = world.runtime.replicas[old[0]]
        assert draining.status is ReplicaStatus.SHUTTING_DOWN
        assert draining.pid not in world.backend.stopped
        shown = draining_json(world.runtime, old[0])
        assert shown is not None and shown["in_flight"] == 1 and shown["limit_s"] == 60
        assert shown["waited_s"] >= 20
        assert old[1] not in world.runtime.replicas  # the idle one went at once
        lb_reports(world, {})  # the stream ended
        await world.advance(1)
        assert old[0] not in world.runtime.replicas
        assert world.events(EventKind.DRAIN_TIMEOUT) == []

    run(world, scenario)


def test_a_drain_past_drain_timeout_s_says_what_it_cut(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        victim = world.replicas()[0]
        world.runtime.transition(victim, ReplicaStatus.SHUTTING_DOWN, "test")
        world.runtime.spawn(victim, world.runtime.retire(victim, "test"))
        for _ in range(59):
            lb_reports(world, {victim.id: 3})
            await world.advance(1)
        assert victim.id in world.runtime.replicas
        for _ in range(3):
            lb_reports(world, {victim.id: 3})
            await world.advance(1)
        assert victim.id not in world.runtime.replicas
        (event,) = world.events(EventKind.DRAIN_TIMEOUT)
        assert event == (
            "3 request(s) still in flight after drain_timeout_s=60: stopping it cuts them"
        )

    run(world, scenario)


def test_scale_down_stops_the_idle_replica_not_the_one_streaming(tmp_path: Path) -> None:
    """Under least_load the newest replica takes the new streams; the newest-first
    order alone would drain it while an older one sat idle."""
    world = World(tmp_path, {"service": {**FIELDS["service"], "replicas": 3}})

    async def scenario() -> None:
        await serving(world, 3)
        ids = [r.id for r in world.replicas()]
        lb_reports(world, {ids[2]: 2, ids[1]: 0, ids[0]: 1})
        two = {"service": {**FIELDS["service"], "replicas": 2}}  # the target drops by one
        spec = world.add_version(2, two, UpdateMode.IN_PLACE)
        world.runtime.rollout.begin(2, spec, UpdateMode.IN_PLACE, "replicas changed")
        await world.tick()
        stopping = [r.id for r in world.replicas(ReplicaStatus.SHUTTING_DOWN)]
        assert stopping == [ids[1]]

    run(world, scenario)


def test_a_draining_replica_keeps_its_gpus_until_its_last_stream_ends(tmp_path: Path) -> None:
    """A full machine: the new version's replica waits for the old one's GPUs, which
    the old one holds for as long as it drains (its stream), never shared."""
    from steadyserve.controller.capacity import CapacityPool
    from steadyserve.core.capacity import Assignment, Gpu, Inventory

    gpus = {"accelerators": "A100:2"}
    service = {**FIELDS["service"], "replicas": 1}
    world = World(tmp_path, {"service": service, "resources": gpus})
    inventory = Inventory(gpus=(Gpu(0, "GPU-0", "NVIDIA A100-SXM4-80GB"), Gpu(1, "GPU-1", "A100")))
    world.runtime.capacity = CapacityPool(inventory, lambda: list(world.runtime.replicas.values()))

    def held() -> list[int]:
        out: list[int] = []
        for r in world.replicas():
            if r.status.is_live or r.status is ReplicaStatus.SHUTTING_DOWN:
                got = Assignment.from_json(r.assignment)
                out.extend(got.gpus if got else ())
        return out

    async def scenario() -> None:
        await serving(world, 1)
        (old,) = world.replicas()
        spec = world.add_version(2, {"service": service, "resources": gpus, "run": "serve 2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        for _ in range(30):  # a 30 s stream on the old replica
            lb_reports(world, {old.id: 1})
            await world.advance(1)
            assert len(held()) == len(set(held())) <= 2, world.describe()
        assert world.runtime.replicas[old.id].status is ReplicaStatus.SHUTTING_DOWN
        # No version-2 replica runs (none, or PENDING): the old one holds both GPUs.
        assert all(r.status is ReplicaStatus.PENDING for r in world.replicas() if r.version == 2)
        assert Assignment.from_json(world.runtime.replicas[old.id].assignment).gpus == (0, 1)
        lb_reports(world, {})  # the stream ended: the GPUs go to the new version
        await world.until("v2 ready", lambda: len(world.replicas(READY)) == 1, seconds=30)
        assert [r.version for r in world.replicas()] == [2] and sorted(held()) == [0, 1]

    run(world, scenario)
