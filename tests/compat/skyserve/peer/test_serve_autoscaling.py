# Ported from skypilot-org/skypilot, tests/unit_tests/test_sky/serve/test_serve_autoscaling.py
# at commit 03f580be39f1272fb407676689de623afe26052a. Every test function, its
# inputs and expected values as written; only the call surface is translated
# (sky_adapter.py maps SkyPilot's spec and autoscaler onto SteadyServe's spec,
# decide() and planner). The helpers keep their names; their bodies build
# SteadyServe's values (a ready replica is a READY ReplicaView, requests are a
# load report, a cluster handle launched with an accelerator is the replica's
# GPU assignment, which global_user_state hands out by cluster name).
#
# Skipped because they test a SkyPilot internal with no SteadyServe counterpart:
# - test_controller_autoscaler_latest_version_initialized: the private
#   SkyServeController._autoscaler.latest_version attribute (SteadyServe's
#   autoscaler does not hold the version; the runtime plans with its own).
# ruff: noqa
# mypy: ignore-errors
import pytest

from tests.compat.skyserve.peer import sky_adapter as autoscalers
from tests.compat.skyserve.peer import sky_adapter as serve_controller
from tests.compat.skyserve.peer.sky_adapter import (
    SkyServiceSpec,
    global_user_state,
    serve_constants,
)

INTERNAL = "tests a SkyPilot internal with no SteadyServe counterpart (see the file header)"


def _build_request_service_spec(**overrides) -> SkyServiceSpec:
    data = {
        "readiness_path": "/",
        "initial_delay_seconds": serve_constants.DEFAULT_INITIAL_DELAY_SECONDS,
        "readiness_timeout_seconds": serve_constants.DEFAULT_READINESS_PROBE_TIMEOUT_SECONDS,
        "min_replicas": 2,
        "max_replicas": 10,
        "num_overprovision": 1,
        "target_qps_per_replica": 5,
    }
    data.update(overrides)
    return SkyServiceSpec(**data)


def _make_ready_replica(replica_id: int, version: int):
    return autoscalers.make_ready_replica(replica_id, version)


def _build_request_autoscaler(**overrides) -> autoscalers.Autoscaler:
    spec = _build_request_service_spec(**overrides)
    return autoscalers.Autoscaler.from_spec("svc", spec)


def _set_requests(autoscaler: autoscalers.Autoscaler, count: int) -> None:
    autoscaler.request_timestamps = [0.0] * count


def _make_handle(accelerator: str):
    return autoscalers.make_handle(accelerator)


@pytest.mark.skip(reason=INTERNAL)
def test_controller_autoscaler_latest_version_initialized(monkeypatch):
    """Controller init syncs autoscaler latest_version on restart."""


def test_controller_restart_no_scale_churn(monkeypatch):
    """Controller restart should not trigger scale-up churn."""

    spec = _build_request_service_spec()
    controller = serve_controller.SkyServeController(
        "svc", spec, version=3, host="127.0.0.1", port=1234
    )

    replica_infos = [
        _make_ready_replica(1, version=3),
        _make_ready_replica(2, version=3),
        _make_ready_replica(3, version=3),
    ]
    decisions = controller._autoscaler.generate_scaling_decisions(
        replica_infos, active_versions=[3]
    )
    scale_ups = [
        decision
        for decision in decisions
        if decision.operator == autoscalers.AutoscalerDecisionOperator.SCALE_UP
    ]
    assert scale_ups == []


def test_request_rate_hysteresis_delays_scale_down():
    """Downscale waits for hysteresis threshold before applying."""
    autoscaler = _build_request_autoscaler(
        min_replicas=1, max_replicas=5, downscale_delay_seconds=40
    )
    autoscaler.target_num_replicas = 2
    _set_requests(autoscaler, 300)

    autoscaler._set_target_num_replicas_with_hysteresis()
    assert autoscaler.target_num_replicas == 2
    autoscaler._set_target_num_replicas_with_hysteresis()
    assert autoscaler.target_num_replicas == 1


def test_request_rate_hysteresis_delays_scale_up():
    """Upscale waits for hysteresis threshold before applying."""
    autoscaler = _build_request_autoscaler(min_replicas=1, max_replicas=5, upscale_delay_seconds=40)
    autoscaler.target_num_replicas = 1
    _set_requests(autoscaler, 301)

    autoscaler._set_target_num_replicas_with_hysteresis()
    assert autoscaler.target_num_replicas == 1
    autoscaler._set_target_num_replicas_with_hysteresis()
    assert autoscaler.target_num_replicas == 2


def test_scale_to_zero_uses_faster_decision_interval():
    """Scale-to-zero uses the shorter decision interval."""
    autoscaler = _build_request_autoscaler(min_replicas=0, max_replicas=3, num_overprovision=0)
    _set_requests(autoscaler, 0)
    autoscaler._set_target_num_replicas_with_hysteresis()
    assert autoscaler.get_final_target_num_replicas() == 0
    assert (
        autoscaler.get_decision_interval()
        == serve_constants.AUTOSCALER_NO_REPLICA_DECISION_INTERVAL_SECONDS
    )


def test_overprovision_scales_up_extra_replica():
    """Overprovision adds an extra scale-up beyond target."""
    autoscaler = _build_request_autoscaler(min_replicas=2, max_replicas=5, num_overprovision=1)
    _set_requests(autoscaler, 0)
    replicas = [
        _make_ready_replica(1, version=autoscaler.latest_version),
        _make_ready_replica(2, version=autoscaler.latest_version),
    ]
    decisions = autoscaler._generate_scaling_decisions(replicas)
    scale_ups = [
        decision
        for decision in decisions
        if decision.operator == autoscalers.AutoscalerDecisionOperator.SCALE_UP
    ]
    assert len(scale_ups) == 1


def test_instance_aware_autoscaler_scales_up(monkeypatch):
    """Instance-aware autoscaler scales up when demand exceeds capacity."""
    spec = _build_request_service_spec(
        load_balancing_policy="instance_aware_least_load",
        target_qps_per_replica={"A100": 10, "V100": 5},
        upscale_delay_seconds=20,
        num_overprovision=0,
    )
    autoscaler = autoscalers.Autoscaler.from_spec("svc", spec)
    _set_requests(autoscaler, 1200)

    handle_map = {
        "replica-1": _make_handle("A100"),
        "replica-2": _make_handle("V100"),
    }

    monkeypatch.setattr(
        global_user_state, "get_handle_from_cluster_name", lambda name: handle_map.get(name)
    )

    replicas = [
        _make_ready_replica(1, version=autoscaler.latest_version),
        _make_ready_replica(2, version=autoscaler.latest_version),
    ]
    decisions = autoscaler._generate_scaling_decisions(replicas)
    scale_ups = [
        decision
        for decision in decisions
        if decision.operator == autoscalers.AutoscalerDecisionOperator.SCALE_UP
    ]
    assert len(scale_ups) == 1


def test_fallback_autoscaler_keeps_base_ondemand():
    """Fallback autoscaler provisions base on-demand replicas."""
    pytest.skip(
        "spot/on-demand fallback: a local replica is never preempted, so there"
        " is no on-demand override to launch (the keys are not applicable)"
    )
    # SkyPilot's body, kept as written (not run):
    spec = _build_request_service_spec(
        base_ondemand_fallback_replicas=1,
        min_replicas=1,
        target_qps_per_replica=5,
        num_overprovision=0,
    )
    autoscaler = autoscalers.Autoscaler.from_spec("svc", spec)
    _set_requests(autoscaler, 300)
    decisions = autoscaler._generate_scaling_decisions([])
    scale_ups = [
        decision
        for decision in decisions
        if decision.operator == autoscalers.AutoscalerDecisionOperator.SCALE_UP
    ]

    assert len(scale_ups) == 1
    assert scale_ups[0].target == autoscalers.FallbackRequestRateAutoscaler.ONDEMAND_OVERRIDE
