"""Autoscaling fields of the service file: both policies' fields and defaults, Ray
Serve's ``autoscaling_config`` as a synonym of ``replica_policy``, and one-line
errors for incoherent policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steadyserve.spec import ReplicaPolicy, ServiceSpec, SpecError, load_service_file, parse_service
from steadyserve.spec.changes import classify

BASE = Path("/nonexistent/app")
NO_WORKDIR: dict[str, str | None] = {"old_workdir_hash": None, "new_workdir_hash": None}


def service(fields: dict[str, Any]) -> ServiceSpec:
    return parse_service({"run": "x", "service": fields}, base_dir=BASE)


def error_of(fields: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        service(fields)
    return str(info.value)


def test_replica_policy_defaults_for_both_policies() -> None:
    sky = service(
        {"replica_policy": {"min_replicas": 1, "max_replicas": 4, "target_qps_per_replica": 2}}
    ).service.replica_policy
    assert sky is not None
    assert (sky.upscale_delay_seconds, sky.downscale_delay_seconds) == (300.0, 1200.0)
    ray = service(
        {"replica_policy": {"min_replicas": 0, "max_replicas": 4, "target_ongoing_requests": 2}}
    ).service.replica_policy
    assert ray is not None
    assert (ray.look_back_period_s, ray.upscale_delay_s, ray.downscale_delay_s) == (30, 30, 600)
    assert ray.downscale_to_zero_delay_s is None
    assert ray.upscaling_factor is None and ray.downscaling_factor is None
    assert ray.initial_replicas is None


def test_only_min_replicas_stays_a_fixed_size() -> None:
    spec = service({"replica_policy": {"min_replicas": 2}})
    policy = spec.service.replica_policy
    assert policy is not None and policy.max_replicas == 2
    assert policy.autoscaling_target is None
    assert spec.service.target_replicas == 2


def test_autoscaling_config_takes_ray_defaults_and_is_stored_as_replica_policy() -> None:
    spec = service({"autoscaling_config": {"min_replicas": 0, "max_replicas": 5}})
    assert spec.service.replicas is None
    assert spec.service.autoscaling_config is None
    assert spec.service.replica_policy == ReplicaPolicy(
        min_replicas=0, max_replicas=5, target_ongoing_requests=2.0
    )
    assert "autoscaling_config" not in spec.spec_json()
    assert ServiceSpec.from_json(spec.spec_json()) == spec
    empty = service({"autoscaling_config": {}}).service.replica_policy
    assert empty is not None  # Ray's defaults: 1..1, target 2
    assert (empty.min_replicas, empty.max_replicas, empty.target_ongoing_requests) == (1, 1, 2.0)


def test_autoscaling_config_with_every_ray_field(tmp_path: Path) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text(
        "run: python app.py\n"
        "service:\n"
        "  autoscaling_config:\n"
        "    min_replicas: 0\n"
        "    initial_replicas: 2\n"
        "    max_replicas: 8\n"
        "    target_ongoing_requests: 4\n"
        "    look_back_period_s: 10\n"
        "    upscale_delay_s: 5\n"
        "    downscale_delay_s: 60\n"
        "    downscale_to_zero_delay_s: 120\n"
        "    upscaling_factor: 1.5\n"
        "    downscaling_factor: 0.5\n"
    )
    spec = load_service_file(path)
    policy = spec.service.replica_policy
    assert policy == ReplicaPolicy(
        min_replicas=0,
        initial_replicas=2,
        max_replicas=8,
        target_ongoing_requests=4,
        look_back_period_s=10,
        upscale_delay_s=5,
        downscale_delay_s=60,
        downscale_to_zero_delay_s=120,
        upscaling_factor=1.5,
        downscaling_factor=0.5,
    )
    assert spec.service.target_replicas == 2  # initial_replicas


def test_synonym_is_the_same_spec_and_no_change() -> None:
    ray = {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 2}
    as_policy = service({"replica_policy": ray})
    as_config = service({"autoscaling_config": ray})
    assert as_policy == as_config
    assert classify(as_policy, as_config, **NO_WORKDIR).empty
    bigger = service({"autoscaling_config": {**ray, "max_replicas": 6}})
    [change] = classify(as_config, bigger, **NO_WORKDIR).changes
    assert (change.path, change.kind) == ("service.replica_policy", "in_place")


CASES: list[tuple[dict[str, Any], str]] = [
    # min > max, in both blocks
    (
        {"replica_policy": {"min_replicas": 3, "max_replicas": 2}},
        "service.replica_policy.max_replicas: must be an integer >= min_replicas",
    ),
    (
        {"autoscaling_config": {"min_replicas": 3, "max_replicas": 2}},
        "service.autoscaling_config.max_replicas: must be an integer >= min_replicas",
    ),
    (  # Ray's max_replicas defaults to 1
        {"autoscaling_config": {"min_replicas": 2}},
        "service.autoscaling_config.max_replicas: must be an integer >= min_replicas",
    ),
    # a target without max_replicas
    (
        {"replica_policy": {"min_replicas": 1, "target_qps_per_replica": 2}},
        "service.replica_policy: target_qps_per_replica needs max_replicas"
        " (the most replicas to scale up to)",
    ),
    (  # Ray's target takes Ray's default max_replicas, 1
        {"replica_policy": {"min_replicas": 2, "target_ongoing_requests": 2}},
        "service.replica_policy.max_replicas: must be an integer >= min_replicas",
    ),
    # both targets at once
    (
        {
            "replica_policy": {
                "min_replicas": 1,
                "max_replicas": 3,
                "target_qps_per_replica": 1,
                "target_ongoing_requests": 2,
            }
        },
        "service.replica_policy: target_qps_per_replica and target_ongoing_requests are"
        " mutually exclusive (pick SkyServe's or Ray Serve's autoscaling policy)",
    ),
    # a range with no target
    (
        {"replica_policy": {"min_replicas": 0, "max_replicas": 3}},
        "service.replica_policy: max_replicas > min_replicas needs an autoscaling target:"
        " target_qps_per_replica or target_ongoing_requests",
    ),
    # both blocks, or a count with the synonym
    (
        {"replica_policy": {"min_replicas": 1}, "autoscaling_config": {"max_replicas": 2}},
        "service: replica_policy and autoscaling_config are mutually exclusive"
        " (autoscaling_config is Ray Serve's name for replica_policy; use one)",
    ),
    (
        {"replicas": 2, "autoscaling_config": {"max_replicas": 2}},
        "service: replicas and autoscaling_config are mutually exclusive"
        " (a fixed count, or autoscaling bounds)",
    ),
    # a field of the other policy would be ignored: refused
    (
        {
            "replica_policy": {
                "min_replicas": 1,
                "max_replicas": 3,
                "target_qps_per_replica": 2,
                "upscale_delay_s": 5,
            }
        },
        "service.replica_policy: upscale_delay_s is Ray Serve's autoscaling field"
        " and needs target_ongoing_requests",
    ),
    (
        {
            "replica_policy": {
                "min_replicas": 1,
                "max_replicas": 3,
                "target_ongoing_requests": 2,
                "downscale_delay_seconds": 5,
            }
        },
        "service.replica_policy: downscale_delay_seconds is SkyServe's autoscaling field"
        " and needs target_qps_per_replica",
    ),
    (
        {"replica_policy": {"min_replicas": 2, "initial_replicas": 3}},
        "service.replica_policy: initial_replicas is Ray Serve's autoscaling field"
        " and needs target_ongoing_requests",
    ),
    (
        {"autoscaling_config": {"max_replicas": 3, "target_qps_per_replica": 2}},
        "service.autoscaling_config.target_qps_per_replica: unknown field",
    ),
    (
        {"autoscaling_config": {"max_replicas": 3, "upscale_delay": 2}},
        "service.autoscaling_config.upscale_delay: unknown field (did you mean upscale_delay_s?)",
    ),
    # Ray's own value rules
    (
        {"autoscaling_config": {"min_replicas": 0, "max_replicas": 0}},
        "service.autoscaling_config.max_replicas: must be an integer >= 1",
    ),
    (
        {"autoscaling_config": {"max_replicas": 3, "initial_replicas": 4}},
        "service.autoscaling_config: initial_replicas must be between min_replicas"
        " and max_replicas",
    ),
    (
        {
            "replica_policy": {
                "min_replicas": 2,
                "max_replicas": 4,
                "target_ongoing_requests": 1,
                "initial_replicas": 1,
            }
        },
        "service.replica_policy: initial_replicas must be between min_replicas and max_replicas",
    ),
    (
        {"autoscaling_config": {"max_replicas": 3, "upscaling_factor": 0}},
        "service.autoscaling_config.upscaling_factor: must be a number > 0",
    ),
    (
        {"autoscaling_config": {"max_replicas": 3, "downscale_to_zero_delay_s": -1}},
        "service.autoscaling_config.downscale_to_zero_delay_s: must be a number >= 0",
    ),
    (
        {"autoscaling_config": {"max_replicas": 3, "target_ongoing_requests": 0}},
        "service.autoscaling_config.target_ongoing_requests: must be a number > 0",
    ),
    ({"autoscaling_config": 5}, "service.autoscaling_config: must be a mapping"),
]


@pytest.mark.parametrize(("fields", "expected"), CASES)
def test_incoherent_policies_get_one_line_naming_the_field(
    fields: dict[str, Any], expected: str
) -> None:
    message = error_of(fields)
    assert message == expected
    assert "\n" not in message


def test_ray_target_without_max_replicas_takes_rays_default_of_one() -> None:
    ray = service({"autoscaling_config": {"target_ongoing_requests": 3}}).service.replica_policy
    assert ray is not None and (ray.min_replicas, ray.max_replicas) == (1, 1)
    sky = service({"replica_policy": {"min_replicas": 0, "target_ongoing_requests": 2}})
    policy = sky.service.replica_policy
    assert policy is not None and policy.max_replicas == 1


def test_peer_fields_accepted_with_their_meaning() -> None:
    ray = service(
        {
            "autoscaling_config": {
                "max_replicas": 4,
                "smoothing_factor": 0.5,
                "metrics_interval_s": 5,
            }
        }
    ).service.replica_policy
    assert ray is not None
    assert list(ray.deprecated_fields()) == ["smoothing_factor", "metrics_interval_s"]
    assert ray.custom_policy_function() is None
    sky = service(
        {
            "replica_policy": {
                "min_replicas": 0,
                "max_replicas": 3,
                "target_qps_per_replica": 1,
                "num_overprovision": 1,
                "decision_interval_s": 1,
                "burst": True,
            }
        }
    ).service.replica_policy
    assert sky is not None and (sky.num_overprovision, sky.decision_interval_s) == (1, 1.0)
    assert sky.burst


def test_a_policy_function_module_must_be_in_the_workdir(tmp_path: Path) -> None:
    (tmp_path / "pol.py").write_text("def f(ctx):\n    return 1\n")
    ok = {"max_replicas": 3, "policy": {"policy_function": "pol:f"}}
    spec = parse_service(
        {"run": "x", "workdir": str(tmp_path), "service": {"autoscaling_config": ok}},
        base_dir=tmp_path,
    )
    assert spec.service.replica_policy is not None
    assert spec.service.replica_policy.custom_policy_function() == "pol:f"
    missing = {"max_replicas": 3, "policy": {"policy_function": "nope.mod:f"}}
    with pytest.raises(SpecError) as info:
        parse_service(
            {"run": "x", "workdir": str(tmp_path), "service": {"autoscaling_config": missing}},
            base_dir=tmp_path,
        )
    assert str(info.value).endswith(
        f"service.replica_policy.policy.policy_function: no module nope/mod.py in the workdir"
        f" {tmp_path}"
    )
