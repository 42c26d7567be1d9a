"""A shadow step carried out by the controller: the real runtime, rollout and canary
driver, real SQLite, the fake backend on simulated time (tests/helpers/fake_controller.py),
with the load balancers' shadow counts fed in as their reports bring them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_controller import World, run

import steadyserve.controller.rollout.in_place as in_place
from steadyserve.controller.metrics import Traffic
from steadyserve.core.canary.steps import Phase
from steadyserve.core.shadow.verdict import Tally
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode, UpdateStatus

READY = ReplicaStatus.READY


def service(pause: Any) -> dict[str, Any]:
    return {
        "replicas": 2,
        "readiness_probe": {"path": "/health", "initial_delay_seconds": 5},
        "health_check_period_s": 1,
        "graceful_shutdown_timeout_s": 2,
        "graceful_shutdown_wait_loop_s": 0.1,
        "canary": {
            "steps": [{"shadow": 50}, {"pause": pause}, {"weight": 100}],
            "analysis": {"max_shadow_diff_rate": 0.01, "min_shadow_compared": 100},
            "shadow": {"ignore": ["$.version"], "headers": ["ETag"]},
        },
    }


def report(
    world: World, alike: int, dropped_total: int = 0, pairs: int = 20, version: int = 2
) -> None:
    """One load report whose shadow counts (cumulative) for ``version`` say ``alike``
    answers equal and ``dropped_total`` missing ``total``, with ``pairs`` stable pairs
    compared."""
    signatures = {"": alike, "removed $.total": dropped_total} if dropped_total else {"": alike}
    tally = Tally(
        mirrored=alike + dropped_total,
        compared=alike + dropped_total,
        signatures=signatures,
        noise_pairs=pairs,
        noise={"changed $.at": pairs},
        examples={"removed $.total": "GET /orders/7?token=***"},
    )
    traffic = Traffic()
    shadow = {str(version): tally.to_json()}
    traffic.ingest(1, {"requests": {}, "shadow": shadow}, world.clock.now())
    world.runtime.canary.ingest(traffic)


async def mirroring(world: World, pause: Any) -> None:
    world.probes.default = (True, "ok")
    await world.until("version 1 ready", lambda: len(ready(world, 1)) == 2)
    spec = world.add_version(2, {"service": service(pause), "run": "serve --v2"})
    world.runtime.rollout.begin(2, spec, UpdateMode.CANARY, "run changed")
    await world.tick()
    report(world, alike=0, pairs=0)  # a report before any copy: twice a second
    await world.until("a version 2 replica READY", lambda: len(ready(world, 2)) == 1)
    await world.tick()


def ready(world: World, version: int) -> list[int]:
    return [r.id for r in world.replicas(READY) if r.version == version]


def update_status(world: World) -> UpdateStatus | None:
    update = world.runtime.rollout.update
    return None if update is None else update.status


def test_the_table_mirrors_the_share_and_no_weight_goes_to_the_new_version(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {"service": service(30)})

    async def scenario() -> None:
        await mirroring(world, 30)
        table = world.runtime.routes.table
        assert table["weights"] == {"1": 100, "2": 0}
        assert table["mirror"]["version"] == 2 and table["mirror"]["percent"] == 50
        assert table["mirror"]["ignore"] == ["$.version"] and table["mirror"]["headers"] == ["etag"]
        assert set(world.routed()) == {*ready(world, 1), *ready(world, 2)}
        assert len(ready(world, 2)) == 1, "50% of 2 replicas is one"
        status = world.runtime.canary.status_json()
        assert status is not None and status["mirror"] == 50 and status["weight"] == 0

    run(world, scenario)


def test_too_few_compared_at_the_end_of_the_pause_aborts(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": service(30)})

    async def scenario() -> None:
        await mirroring(world, 30)
        report(world, alike=40)
        await world.advance(10)
        canary = world.runtime.canary
        assert canary.state is not None and canary.state.step == 1, "mirroring through the pause"
        await world.until("the update failed", lambda: update_status(world) is UpdateStatus.FAILED)
        assert canary.state is not None and canary.state.phase is Phase.ABORTED
        update = world.runtime.rollout.update
        assert update is not None and "inconclusive at the end of the 30s pause" in update.message
        assert (
            "mirror" not in world.runtime.routes.table
            or world.runtime.routes.table["mirror"] is None
        )

    run(world, scenario)


def test_a_rate_above_the_limit_aborts_at_once(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": service({})})

    async def scenario() -> None:
        await mirroring(world, {})
        report(world, alike=99)
        await world.tick()
        assert update_status(world) is UpdateStatus.IN_PROGRESS
        report(world, alike=196, dropped_total=4)
        await world.tick()
        assert update_status(world) is UpdateStatus.FAILED
        update = world.runtime.rollout.update
        assert update is not None
        assert "shadow analysis failed: 4 of 200 compared answers differ" in update.message
        events = world.events(EventKind.CANARY_ANALYSIS)
        assert any("shadow failed" in e and "GET /orders/7?token=***" in e for e in events)

    run(world, scenario)


def test_a_passed_verdict_walks_on_and_mirroring_ends_at_the_weight_step(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": service(5)})

    async def scenario() -> None:
        await mirroring(world, 5)
        report(world, alike=150)
        await world.until(
            "the update succeeded", lambda: update_status(world) is UpdateStatus.SUCCEEDED
        )
        assert world.runtime.routes.table.get("mirror") is None

    run(world, scenario)


def test_a_restarted_controller_mirrors_again_and_counts_from_its_restart(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {"service": service({})})

    async def scenario() -> None:
        await mirroring(world, {})
        report(world, alike=60)
        await world.tick()
        await world.runtime.detach()
        world.runtime = world.new_runtime()
        world.runtime.resume()
        await world.tick()
        assert world.runtime.routes.table["mirror"]["percent"] == 50
        report(world, alike=150)  # the load balancers' counts kept growing
        await world.tick()
        report(world, alike=220)
        await world.tick()
        shadow = (world.runtime.canary.status_json() or {})["shadow"]
        assert shadow["compared"] == 70, "counted from the restart, the window starts again"

    run(world, scenario)


def test_a_change_joining_mid_shadow_counts_the_new_versions_answers_from_the_join(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator's seed 1458: an in-place change joined a canary during its shadow
    step; the mirror went to the joined version, whose counts start at zero, but the
    verdict kept the base taken from the version before (after a restart, not zero),
    which hid the new version's compared answers. The base is taken anew."""

    async def post(*_: Any, **__: Any) -> tuple[bool, bool, str]:
        return True, True, ""

    monkeypatch.setattr(in_place, "post_user_config", post)
    world = World(tmp_path, {"service": service({})})

    async def scenario() -> None:
        await mirroring(world, {})
        await world.runtime.detach()  # a restart: the base is its first report's counts
        world.runtime = world.new_runtime()
        world.runtime.resume()
        await world.tick()
        report(world, alike=60)
        await world.tick()
        joined = {"service": {**service({}), "user_config": {"level": 2}}, "run": "serve --v2"}
        spec3 = world.add_version(3, joined, UpdateMode.IN_PLACE)
        update = world.runtime.rollout.begin(3, spec3, UpdateMode.IN_PLACE, "user_config changed")
        assert update.mode is UpdateMode.CANARY and update.to_version == 3  # joined
        await world.tick()
        assert world.runtime.routes.table["mirror"]["version"] == 3
        for alike in (10, 100):  # version 3's own counts, from zero at the join
            report(world, alike=alike, version=3)
            await world.tick()
        shadow = (world.runtime.canary.status_json() or {})["shadow"]
        # Not 100 - 60: version 2's base would hide 60 of version 3's answers.
        assert shadow["compared"] == 90, "counted from the join's first report"

    run(world, scenario)
