"""A ``down`` whose first write fails (a full disk) leaves the service as it was:
listed, its status unchanged, and still supervised, so a replica that dies
afterwards is replaced. The real runtime on the fake backend and simulated time
(tests/helpers/fake_controller.py), with SQLite refusing writes as a full disk does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.helpers.fake_controller import World, run

from steadyserve.core.states import Desired, ReplicaStatus, ServiceStatus


def test_a_down_that_cannot_be_recorded_leaves_the_service_supervised(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": {"replicas": 2}})

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        world.runtime.start()
        await world.until("2 READY", lambda: len(world.replicas(ReplicaStatus.READY)) == 2)
        status = world.runtime.row.status
        world.store.execute("PRAGMA query_only = ON")
        with pytest.raises(sqlite3.OperationalError):
            await world.runtime.take_down(purge=False)
        world.store.execute("PRAGMA query_only = OFF")
        assert world.runtime.row.status is status is not ServiceStatus.SHUTTING_DOWN
        row = world.store.service("svc")
        assert row is not None and row.desired is Desired.RUNNING and row.status is status
        # Still supervised: a replica that dies is replaced.
        victim = world.replicas(ReplicaStatus.READY)[0]
        world.process(victim).exit(137)
        await world.tick()
        await world.until(
            "a replacement READY",
            lambda: (
                [r.id for r in world.replicas(ReplicaStatus.READY)]
                == sorted({1, 2, 3} - {victim.id})
            ),
        )

    run(world, scenario)


def test_a_down_cut_short_after_stopping_is_finished_by_the_next(tmp_path: Path) -> None:
    """The disk fills while the down stops processes: its last write (forgetting the
    service) fails. The state still lists the service, to be taken down (so a
    restarted controller finishes it); the next down finishes it."""
    world = World(tmp_path, {"service": {"replicas": 2}})
    stop = world.lb.stop

    async def stop_then_disk_full() -> None:
        await stop()
        world.store.execute("PRAGMA query_only = ON")

    world.lb.stop = stop_then_disk_full  # type: ignore[method-assign]

    async def scenario() -> None:
        world.probes.default = (True, "ok")
        world.runtime.start()
        await world.until("2 READY", lambda: len(world.replicas(ReplicaStatus.READY)) == 2)
        with pytest.raises(sqlite3.OperationalError):
            await world.runtime.take_down(purge=False)
        world.store.execute("PRAGMA query_only = OFF")
        row = world.store.service("svc")
        assert row is not None and row.desired is Desired.DOWN
        assert row.status is ServiceStatus.SHUTTING_DOWN
        world.lb.stop = stop  # type: ignore[method-assign]
        await world.runtime.take_down(purge=False)
        assert world.store.service("svc") is None
        assert all(p.exit_code() is not None for p in world.backend.replicas.values())

    run(world, scenario)
