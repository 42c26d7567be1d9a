"""The service runtime against the fake backend on simulated time: reconcile, probe
failures, the early-failure judgement, re-adoption, update failure and rollback.
No sockets, no processes, no sleeps (tests/helpers/fake_controller.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import World, run

from steadyserve.core.states import (
    ReplicaStatus,
    ServiceStatus,
    UpdateMode,
    UpdateStatus,
    VersionOutcome,
)
from steadyserve.wire import replica_contract as contract

FIELDS: dict[str, Any] = {
    "service": {
        "replicas": 2,
        "readiness_probe": {"path": "/health", "initial_delay_seconds": 5},
        "health_check_period_s": 1,
        "update_deadline_s": 60,
        "graceful_shutdown_timeout_s": 2,
        "graceful_shutdown_wait_loop_s": 0.1,
    }
}
READY = ReplicaStatus.READY


async def serving(world: World, count: int = 2) -> None:
    """Tick the service up to ``count`` READY replicas (their probes pass)."""
    world.probes.default = (True, "ok")
    await world.tick()
    await world.until(f"{count} ready", lambda: len(world.replicas(READY)) == count)
    world.probes.default = (False, "connection refused")
    world.answer_all(True)


def test_reconcile_launches_to_the_target_through_the_backend(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await world.tick()
        assert [r.status for r in world.replicas()] == [ReplicaStatus.STARTING] * 2
        for replica in world.replicas():
            proc = world.process(replica)
            # The backend chose the address; the runtime passed no PORT and recorded it.
            assert contract.PORT not in proc.request.env
            assert (replica.ip, replica.port) == (proc.host, proc.port)
        assert world.routed() == []
        world.answer_all(True)
        await world.advance(0.2)
        assert [r.status for r in world.replicas()] == [READY, READY]
        assert world.routed() == [1, 2]
        world.runtime.routes.acknowledge("first poll")  # the LB has polled once
        await world.tick()
        assert world.runtime.row.status is ServiceStatus.READY
        await world.advance(3)
        assert len(world.backend.replicas) == 2  # steady: nothing more launched

    run(world, scenario)


def test_a_replica_writes_its_python_output_unbuffered_unless_envs_say(tmp_path: Path) -> None:
    """A print shows in ``steady logs`` when it happens, as in SkyServe's logs (its
    test_skyserve_cancel reads a replica's print while the replica runs)."""
    world = World(tmp_path, FIELDS)
    own = World(tmp_path / "own", {**FIELDS, "envs": {"PYTHONUNBUFFERED": ""}})

    async def scenario() -> None:
        await world.tick()
        assert world.process(world.replicas()[0]).request.env["PYTHONUNBUFFERED"] == "1"

    async def its_own() -> None:
        await own.tick()
        assert own.process(own.replicas()[0]).request.env["PYTHONUNBUFFERED"] == ""

    run(world, scenario)
    run(own, its_own)


def test_an_exited_replica_is_replaced_and_kept_listed_as_failed(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        first = world.replicas()[0]
        world.process(first).exit(137)
        await world.tick()
        assert first.status is ReplicaStatus.FAILED
        assert world.events("FAILED") == ["process exited with code 137"]
        assert first.id not in world.routed()
        world.probes.default = (True, "ok")
        await world.until("a replacement ready", lambda: len(world.replicas(READY)) == 2)
        assert [r.id for r in world.replicas(READY)] == [2, 3]

    run(world, scenario)


def test_a_ready_replica_whose_app_ends_cleanly_is_failed_probing_as_in_skyserve(
    tmp_path: Path,
) -> None:
    """SkyServe reports a served app that ends with code 0 as FAILED_PROBING (its job
    succeeded, only its probes fail; SkyPilot's test_skyserve_failures), and only a
    non-zero exit as FAILED. Replaced like either."""
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        first = world.replicas()[0]
        world.process(first).exit(0)
        await world.tick()
        assert first.status is ReplicaStatus.FAILED_PROBING
        assert world.events("FAILED_PROBING") == [
            "process exited with code 0 after it was ready: its probes fail"
        ]
        assert first.id not in world.routed()
        world.probes.default = (True, "ok")
        await world.until("a replacement ready", lambda: len(world.replicas(READY)) == 2)

    run(world, scenario)


def test_a_ready_replica_is_not_ready_at_one_failed_probe_and_replaced_after_three(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        sick = world.replicas()[0]
        assert sick.port is not None and sick.pid is not None
        pid = sick.pid
        world.probes.answers[sick.port] = (False, "readiness probe /health answered 503")
        await world.advance(1.0)
        assert sick.status is ReplicaStatus.NOT_READY and sick.id not in world.routed()
        await world.advance(1.0)
        assert sick.status is ReplicaStatus.NOT_READY
        await world.advance(1.0)
        assert sick.status is ReplicaStatus.FAILED_PROBING
        assert world.backend.stopped == [pid]  # its process was stopped
        assert world.events("FAILED_PROBING") == [
            "3 probes failed in a row: readiness probe /health answered 503"
        ]
        # A replica that recovers in between is ready again, its count reset.
        other = world.replicas(READY)[0]
        assert other.port is not None
        world.probes.answers[other.port] = (False, "503")
        await world.advance(1.0)
        assert other.status is ReplicaStatus.NOT_READY
        world.probes.answers[other.port] = (True, "ok")
        await world.advance(1.0)
        assert other.status is READY

    run(world, scenario)


def test_a_version_whose_replicas_fail_before_ready_is_broken_and_not_relaunched(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        world.runtime.routes.acknowledge("first poll")  # the LB runs
        await world.tick()
        first, second = world.replicas()
        world.process(first).exit(1)
        await world.tick()
        assert first.status is ReplicaStatus.FAILED
        assert world.events("VERSION_BROKEN") == [
            "version 1 failed before any replica was ready; not relaunching"
        ]
        # Never ready: the other fails its initial delay; nothing new is launched.
        await world.advance(6)
        assert second.status is ReplicaStatus.FAILED_INITIAL_DELAY
        assert len(world.backend.replicas) == 2
        assert world.runtime.row.status is ServiceStatus.FAILED

    run(world, scenario)


def test_a_failure_after_the_version_served_is_not_a_broken_version(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        world.process(world.replicas()[0]).exit(1)
        await world.tick()
        assert world.events("VERSION_BROKEN") == []
        assert len(world.backend.replicas) == 3  # replaced at once

    run(world, scenario)


def test_a_restarted_controller_readopts_running_replicas_and_fails_vanished_ones(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {"service": {**FIELDS["service"], "replicas": 3}})

    async def scenario() -> None:
        await serving(world, 3)
        await world.runtime.detach()  # the controller stops; replicas keep running
        kept, vanished, _ = world.replicas()
        world.process(vanished).exit(-9)  # dies while no controller watches
        world.runtime = world.new_runtime()
        world.runtime.resume()
        await world.settle()
        by_id = {r.id: r for r in world.replicas()}
        assert by_id[vanished.id].status is ReplicaStatus.FAILED
        assert "gone while the controller was down" in world.events("FAILED")
        probes_before = world.probes.count
        await world.advance(1.0)
        assert world.probes.count > probes_before  # the survivors are probed again
        assert by_id[kept.id].status is READY
        assert by_id[kept.id].pid == kept.pid  # the same process, not a new one
        world.probes.default = (True, "ok")
        await world.until("3 ready again", lambda: len(world.replicas(READY)) == 3)
        assert len(world.backend.replicas) == 4  # only the vanished one was replaced

    run(world, scenario)


def test_a_failed_update_rolls_back_and_the_old_version_keeps_serving(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        old = [r.id for r in world.replicas(READY)]
        spec = world.add_version(2, {**FIELDS, "run": "crash"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        await world.tick()
        new = [r for r in world.replicas() if r.version == 2]
        assert new and len(new) <= 2
        for replica in new:
            world.process(replica).exit(3)  # version 2 crashes before it is ready
        await world.tick(2)
        update = world.runtime.rollout.update
        assert update is not None and update.status is UpdateStatus.FAILED
        assert update.message == (
            "version 2 failed before any replica was ready; rolled back to version 1"
        )
        assert world.runtime.row.version == 1
        version = world.store.version("svc", 2)
        assert version is not None and version.outcome is VersionOutcome.FAILED
        assert [r.id for r in world.replicas(READY)] == old
        assert world.routed() == old  # the old replicas served throughout
        await world.advance(2)
        assert all(r.version == 1 for r in world.replicas() if r.status.is_live)

    run(world, scenario)


def test_an_update_past_its_deadline_rolls_back(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        deadline = {**FIELDS["service"], "update_deadline_s": 4}
        spec = world.add_version(2, {"service": deadline, "run": "slow"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        await world.advance(1.0)
        # The new replica neither fails nor gets ready (initial delay 5 s > deadline 4 s).
        await world.advance(3.5)
        update = world.runtime.rollout.update
        assert update is not None and update.status is UpdateStatus.FAILED
        assert update.message.startswith("not done within update_deadline_s=4")
        assert world.runtime.row.version == 1

    run(world, scenario)


def test_a_rolling_update_that_succeeds_retires_the_old_version(tmp_path: Path) -> None:
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        spec = world.add_version(2, {**FIELDS, "run": "serve --v2"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        world.probes.default = (True, "ok")

        def done() -> bool:
            update = world.runtime.rollout.update
            return update is not None and update.status is UpdateStatus.SUCCEEDED

        await world.until("the update succeeded", done)
        await world.advance(3)  # the old replicas drain (graceful_shutdown_timeout_s 2)
        assert {r.version for r in world.replicas()} == {2}
        assert world.runtime.row.stable_version == 2
        old = world.store.version("svc", 1)
        assert old is not None and old.outcome is VersionOutcome.RETIRED

    run(world, scenario)


def test_an_update_whose_new_replicas_keep_failing_rolls_back(tmp_path: Path) -> None:
    """Version 2 served once (so it is not broken), then its replicas keep crashing:
    after max(3, target) failures the update fails and version 1 is the target again."""
    world = World(tmp_path, FIELDS)

    async def scenario() -> None:
        await serving(world)
        spec = world.add_version(2, {**FIELDS, "run": "flaky"})
        world.runtime.rollout.begin(2, spec, UpdateMode.ROLLING, "run changed")
        await world.tick()
        first = next(r for r in world.replicas() if r.version == 2)
        assert first.port is not None
        world.probes.answers[first.port] = (True, "ok")  # only this one ever gets ready
        await world.until("a v2 replica ready", lambda: 2 in world.runtime.ready_versions)
        update = world.runtime.rollout.update
        assert update is not None
        for _ in range(10):
            if update.status is not UpdateStatus.IN_PROGRESS:
                break
            live = [r for r in world.replicas() if r.version == 2 and r.status.is_live and r.pid]
            if live:
                world.process(live[0]).exit(1)  # one crash at a time
            await world.advance(0.25)
        assert update.status is UpdateStatus.FAILED
        assert update.message == "3 replicas of version 2 failed; rolled back to version 1"
        assert world.runtime.row.version == 1
        assert world.events("VERSION_BROKEN") == []

    run(world, scenario)
