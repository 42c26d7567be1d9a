"""The controller's load window and autoscaler, driven by a simulated clock."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from tests.helpers.own_count import read_own_count

from steadyserve.controller.autoscaler import Autoscaler
from steadyserve.controller.load import (
    OWN_COUNT_FRESH_S,
    CountTarget,
    ServiceLoad,
)
from steadyserve.core.autoscale import FixedPolicy, OngoingPolicy, QpsPolicy
from steadyserve.core.planner import ReplicaView, plan_steady
from steadyserve.core.states import ReplicaStatus

# ---------------------------------------------------------------- load window


def test_cumulative_counts_become_started_since_the_previous_report() -> None:
    load = ServiceLoad(span=10)
    load.lb_report(1.0, {1: 0}, {1: 100}, lb_pid=7)  # baseline: not a burst of 100
    sample = load.lb_report(1.5, {1: 2}, {1: 104}, queued=3, lb_pid=7)
    assert sample.started == 4 and sample.ongoing == 5
    # A replica new to the table started all its requests since the last report.
    sample = load.lb_report(2.0, {1: 0, 2: 1}, {1: 104, 2: 6}, lb_pid=7)
    assert [r.started for r in sample.replicas] == [0, 6]


def test_a_new_load_balancer_process_only_sets_a_baseline() -> None:
    load = ServiceLoad(span=10)
    load.lb_report(1.0, {1: 0}, {1: 50}, lb_pid=7)
    sample = load.lb_report(1.5, {1: 0}, {1: 3}, lb_pid=8)  # the LB restarted
    assert sample.started == 0
    assert load.lb_report(2.0, {1: 0}, {1: 5}, lb_pid=8).started == 2


def test_a_replicas_own_count_replaces_the_lbs_while_fresh() -> None:
    load = ServiceLoad(span=10)
    load.own_count(1, now=10.0, ongoing=4)
    sample = load.lb_report(10.5, {1: 1, 2: 2}, {1: 0, 2: 0}, lb_pid=1)
    assert sample.ongoing == 4 + 2
    stale = load.lb_report(10.0 + OWN_COUNT_FRESH_S + 0.1, {1: 1, 2: 2}, {}, lb_pid=1)
    assert stale.ongoing == 1 + 2
    load.forget(keep={2})
    load.own_count(2, now=20.0, ongoing=0)
    assert load.lb_report(20.2, {1: 1, 2: 2}, {}, lb_pid=1).ongoing == 1 + 0


# ---------------------------------------------------------------- autoscaler


def report(scaler: Autoscaler, now: float, inflight: int, queued: int = 0) -> None:
    scaler.load.lb_report(now, {1: inflight}, {1: 0}, queued=queued, lb_pid=1)


def test_ongoing_load_scales_up_after_the_delay_and_records_the_reason() -> None:
    recorded: list[str] = []
    policy = OngoingPolicy(
        min_replicas=1,
        max_replicas=3,
        target_ongoing_requests=1,
        look_back_period_s=2,
        upscale_delay_s=1,
        downscale_delay_s=3,
    )
    scaler = Autoscaler(policy, running=None, record=recorded.append)
    assert scaler.target() == 1
    now = 0.0
    for _ in range(4):  # 1.5 in flight on 1 replica: wants 2, not a burst (not > 2x)
        now += 0.5
        report(scaler, now, inflight=1, queued=1)
        scaler.step(now, serving=1)
    assert scaler.target() == 2
    assert recorded == ["ongoing 2.0 over 2 s / target 1 -> 2 replicas"]
    status = scaler.status_json(now)
    assert status["policy"] == "ongoing_requests" and status["current_ongoing"] == 2.0
    assert status["last_change"] == recorded[0]


def test_idle_service_goes_down_after_the_downscale_delay_only() -> None:
    recorded: list[str] = []
    policy = OngoingPolicy(
        min_replicas=1,
        max_replicas=3,
        target_ongoing_requests=1,
        look_back_period_s=1,
        upscale_delay_s=1,
        downscale_delay_s=3,
    )
    scaler = Autoscaler(policy, running=3, record=recorded.append)
    assert scaler.target() == 3  # a restarted controller keeps what runs
    now, steps = 0.0, []
    while now < 6:
        now += 0.5
        report(scaler, now, inflight=0)
        scaler.step(now, serving=3)
        steps.append((now, scaler.target()))
    first_down = next(t for t, target in steps if target == 1)
    assert 3.0 <= first_down <= 4.0
    assert recorded == ["ongoing 0.0 over 1 s / target 1 -> 1 replica (min_replicas 1)"]


def test_request_waiting_at_zero_scales_up_at_once_and_only_once() -> None:
    recorded: list[str] = []
    policy = QpsPolicy(min_replicas=0, max_replicas=2, target_qps_per_replica=1)
    scaler = Autoscaler(policy, running=0, record=recorded.append)
    assert scaler.target() == 0 and scaler.allows_zero
    assert scaler.request_waiting(1.0).target == 1
    assert scaler.request_waiting(1.1).target == 1
    assert recorded == ["request waiting at zero -> 1 replica"]


def test_policy_change_in_place_keeps_the_target_within_new_bounds() -> None:
    policy = OngoingPolicy(min_replicas=1, max_replicas=5, target_ongoing_requests=1)
    scaler = Autoscaler(policy, running=4, record=lambda _: None)
    scaler.set_policy(OngoingPolicy(min_replicas=1, max_replicas=2, target_ongoing_requests=1))
    report(scaler, 1.0, inflight=0)
    scaler.step(1.0, serving=4)
    assert scaler.target() == 2
    scaler.set_policy(FixedPolicy(3))
    assert scaler.target() == 3 and not scaler.scales


def test_fixed_size_records_no_autoscaling_event() -> None:
    recorded: list[str] = []
    scaler = Autoscaler(FixedPolicy(2), running=5, record=recorded.append)
    assert scaler.target() == 2
    scaler.step(1.0, serving=2)
    assert scaler.request_waiting(1.0).target == 2
    assert recorded == []


# ---------------------------------------------------------------- own counts


def test_read_own_count_sends_the_control_headers() -> None:
    """A stand-in control port that answers /-/info only with the right secret."""

    async def info(request: web.Request) -> web.Response:
        if request.headers.get("X-Secret") != "s3":
            return web.json_response({"error": "secret"}, status=401)
        return web.json_response({"ongoing_requests": 3})

    async def main() -> tuple[float | None, float | None, float | None]:
        app = web.Application()
        app.router.add_get("/-/info", info)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                good = await read_own_count(
                    session, CountTarget(1, "127.0.0.1", port, {"X-Secret": "s3"})
                )
                bad = await read_own_count(session, CountTarget(1, "127.0.0.1", port, {}))
        finally:
            await runner.cleanup()
        async with aiohttp.ClientSession() as session:
            gone = await read_own_count(session, CountTarget(1, "127.0.0.1", port, {}))
        return good, bad, gone

    assert asyncio.run(main()) == (3.0, None, None)


# ---------------------------------------------------------------- planner victims


def test_scale_down_stops_not_ready_replicas_first_then_the_newest() -> None:
    ready, starting = ReplicaStatus.READY, ReplicaStatus.STARTING
    views = [
        ReplicaView(1, 1, ready),
        ReplicaView(2, 1, starting),
        ReplicaView(3, 1, ready),
        ReplicaView(4, 1, ready),
    ]
    plan = plan_steady(2, 1, views, version_broken=False)
    assert [rid for rid, _ in plan.drain] == [2, 4]
    assert plan.routable == frozenset({1, 3})
