"""A service deleted and made again under its name, as ``serve.delete`` then
``serve.run`` does: the new runtime's route tables count from version 1 again, so
they must not be mistaken for the old ones by a poll that knew those
(controller/routes.py, controller/daemon.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.helpers.fake_controller import World

from steadyserve.controller.daemon import Controller
from steadyserve.controller.routes import RoutePublisher


def table(*ids: int) -> dict[str, Any]:
    return {"replicas": [{"id": i} for i in ids]}


def test_a_remade_service_answers_a_poll_that_knew_the_old_table(tmp_path: Path) -> None:
    world = World(tmp_path, {})
    controller = Controller(world.home)
    controller.backend = world.backend
    controller.probe_session = None  # type: ignore[assignment]  # nothing is probed
    row = world.store.service("svc")
    assert row is not None
    old, new = controller._new_runtime(row), controller._new_runtime(row)
    old.routes.publish(table(1))
    known = old.routes.token  # what a handle of the first run last acknowledged
    new.routes.publish(table(2))  # the same version number, other replicas

    answer = asyncio.run(new.routes.wait(known, timeout=0.0))

    assert answer is not None and answer["replicas"] == [{"id": 2}]
    assert old.routes.epoch != new.routes.epoch


def test_closing_answers_an_open_poll_at_once_and_every_later_one() -> None:
    async def scenario() -> tuple[Any, Any]:
        pub = RoutePublisher("e")
        pub.publish(table(1))
        poll = asyncio.ensure_future(pub.wait(pub.token, timeout=3600.0))
        await asyncio.sleep(0)  # the poll is waiting on the table
        pub.close()
        first = await asyncio.wait_for(poll, timeout=10.0)
        return first, await pub.wait("", timeout=3600.0)

    assert asyncio.run(scenario()) == (None, None)
