"""Service and fleet file parsing: good files load into the normal form, every bad
value gets its exact one-line message, and no input escapes as anything but
SpecError."""

from __future__ import annotations

import datetime
import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.helpers.fleet import load_fleet_file

from steadyserve.spec import (
    MAX_FILE_BYTES,
    NAME_PATTERN,
    CanaryStep,
    ReadinessProbe,
    Resources,
    ServiceSection,
    ServiceSpec,
    SpecError,
    load_service_file,
    parse_service,
)

BASE = Path("/nonexistent/demo_app")

FULL_EXAMPLE = """\
name: http-server
service:
  readiness_probe:
    path: /health
    initial_delay_seconds: 20
    timeout_seconds: 15
    post_data: {"prompt": "hi"}
    headers: {Authorization: Bearer x}
  replica_policy:
    min_replicas: 1
    max_replicas: 5
    target_qps_per_replica: 2.5
    upscale_delay_seconds: 300
    downscale_delay_seconds: 1200
  update_mode: rolling
  update_deadline_s: 600
  rolling_update:
    max_surge: 100%
    max_unavailable: 0
  canary:
    steps: [{weight: 10}, {pause: 60}, {weight: 100}]
    analysis: {max_error_rate: 0.01, max_p99_latency_ms: 500, min_requests: 100}
  max_ongoing_requests: 100
  max_queued_requests: -1
  load_balancing_policy: least_load
  graceful_shutdown_wait_loop_s: 2
  graceful_shutdown_timeout_s: 20
  health_check_period_s: 10
  health_check_timeout_s: 30
  user_config: {threshold: 0.5, labels: [a, b]}
  reconfigure_path: /-/reconfigure
  port: 30001
resources:
  cpus: 2+
  memory: 4+
  accelerators: T4:1
envs: {KEY: value, WORKERS: 4, DEBUG: true}
workdir: ./app
setup: pip install -r requirements.txt
run: python server.py --port $PORT
"""

SKYSERVE_TASK = """\
service:
  readiness_probe: /v1/models
  replicas: 2
resources:
  infra: aws
  cloud: aws
  region: us-east-1
  zone: us-east-1a
  instance_type: g5.xlarge
  use_spot: true
  disk_size: 256GB
  disk_tier: best
  ports: 8080
  image_id: docker:vllm/vllm-openai:latest
  labels: {team: ml}
  accelerators: {L4:1, A10G:1}
  any_of:
    - infra: gcp
    - cpus: 8
  ordered:
    - region: us-west-2
  job_recovery: FAILOVER
num_nodes: 1
envs:
  MODEL: meta-llama/Llama-3-8B
setup: pip install vllm
run: vllm serve $MODEL --port $PORT
"""


def write(folder: Path, text: str, name: str = "service.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def parse(data: dict[str, Any], **kw: Any) -> ServiceSpec:
    return parse_service(data, base_dir=BASE, **kw)


def error_of(data: object) -> str:
    with pytest.raises(SpecError) as info:
        parse_service(data, base_dir=BASE)
    return str(info.value)


# ---------------------------------------------------------------------- good files


def test_design_example_loads_in_normal_form(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    spec = load_service_file(write(tmp_path, FULL_EXAMPLE))
    svc = spec.service
    assert spec.name == "http-server"
    assert spec.workdir == str((tmp_path / "app").resolve())
    assert svc.readiness_probe == ReadinessProbe(
        path="/health",
        initial_delay_seconds=20,
        timeout_seconds=15,
        post_data={"prompt": "hi"},
        headers={"Authorization": "Bearer x"},
    )
    assert svc.replicas is None and svc.replica_policy is not None
    assert svc.replica_policy.max_replicas == 5
    assert svc.replica_policy.autoscaling_target == "qps"
    assert svc.target_replicas == 1
    assert svc.canary.steps == [CanaryStep(weight=10), CanaryStep(pause=60), CanaryStep(weight=100)]
    assert svc.canary.analysis.max_p99_latency_ms == 500.0
    assert svc.user_config == {"threshold": 0.5, "labels": ["a", "b"]}
    assert svc.port == 30001
    assert isinstance(svc.update_deadline_s, float)
    assert isinstance(svc.max_ongoing_requests, int)
    assert spec.envs == {"KEY": "value", "WORKERS": "4", "DEBUG": "true"}
    assert spec.resources.min_cpus == 2.0
    assert spec.resources.min_memory_gb == 4.0
    assert spec.resources.accelerator_choices() == [("T4", 1.0)]
    assert spec.replica_kind == "command"
    assert ServiceSpec.from_json(spec.spec_json()) == spec


def test_minimal_run_only_gets_every_default(tmp_path: Path) -> None:
    folder = tmp_path / "My_App"
    folder.mkdir()
    spec = load_service_file(write(folder, "run: python -m http.server $PORT\n"))
    svc = spec.service
    assert spec.name == "my-app"  # from the folder: lowercased, _ -> -
    assert svc.replicas == 1 and svc.replica_policy is None
    assert svc.readiness_probe == ReadinessProbe(path="/")
    assert svc.readiness_probe.initial_delay_seconds == 1200.0
    assert svc.update_mode == "rolling"
    assert svc.update_deadline_s == 600.0
    assert svc.rolling_update.max_surge == "100%"
    assert svc.rolling_update.max_unavailable == 0
    assert svc.max_ongoing_requests == 100
    assert svc.max_queued_requests == -1
    assert svc.load_balancing_policy == "least_load"
    assert (svc.graceful_shutdown_wait_loop_s, svc.graceful_shutdown_timeout_s) == (2.0, 20.0)
    assert (svc.health_check_period_s, svc.health_check_timeout_s) == (10.0, 30.0)
    assert svc.user_config is None and svc.reconfigure_path is None and svc.port is None
    assert spec.envs == {} and spec.workdir is None and spec.num_nodes == 1


def test_bare_readiness_path_is_normalised_to_object() -> None:
    spec = parse({"run": "x", "service": {"readiness_probe": "/health"}})
    assert spec.service.readiness_probe == ReadinessProbe(path="/health")
    assert '"readiness_probe":{"headers":{},' in spec.spec_json()


def test_skyserve_task_with_resource_extras_runs_unchanged(tmp_path: Path) -> None:
    spec = load_service_file(write(tmp_path, SKYSERVE_TASK))
    assert spec.service.replicas == 2
    assert spec.service.readiness_probe.path == "/v1/models"
    assert spec.resources.accelerator_choices() == [("L4", 1.0), ("A10G", 1.0)]
    assert spec.resources.any_of is not None and spec.resources.any_of[1].cpus == 8
    assert ServiceSpec.from_json(spec.spec_json()) == spec


def test_python_replica_and_small_times() -> None:
    spec = parse(
        {
            "import_path": "text_ml.models:Translator",
            "service": {"health_check_period_s": 0.2, "graceful_shutdown_timeout_s": 0},
        }
    )
    assert spec.replica_kind == "python"
    assert spec.service.health_check_period_s == 0.2


def test_name_argument_beats_file_beats_folder() -> None:
    assert parse({"run": "x"}).name == "demo-app"
    assert parse({"run": "x", "name": "from-file"}).name == "from-file"
    assert parse({"run": "x", "name": "from-file"}, name="from-arg").name == "from-arg"


def test_null_sections_mean_defaults() -> None:
    spec = parse({"run": "x", "service": None, "resources": None, "envs": None})
    assert spec == parse({"run": "x"})


def test_only_min_replicas_is_fixed_size() -> None:
    policy = parse({"run": "x", "service": {"replica_policy": {"min_replicas": 3}}})
    assert policy.service.replica_policy is not None
    assert policy.service.replica_policy.max_replicas == 3
    assert policy.service.target_replicas == 3


def test_integral_floats_are_counts() -> None:
    assert parse({"run": "x", "service": {"replicas": 2.0}}).service.replicas == 2


@pytest.mark.parametrize(
    ("surge", "unavailable", "target", "expected"),
    [
        ("100%", 0, 3, (3, 0)),
        ("25%", "25%", 10, (3, 2)),  # surge rounds up, unavailable down
        ("0%", "10%", 3, (0, 1)),  # both resolve to 0: Kubernetes allows one unavailable
        (0, 5, 2, (0, 2)),  # never more unavailable than the target
        (2, "100%", 0, (2, 0)),
    ],
)
def test_surge_and_unavailable_counts(
    surge: int | str, unavailable: int | str, target: int, expected: tuple[int, int]
) -> None:
    svc = ServiceSection.model_validate(
        {"rolling_update": {"max_surge": surge, "max_unavailable": unavailable}}
    )
    assert (svc.max_surge_count(target), svc.max_unavailable_count(target)) == expected


def test_resource_helpers() -> None:
    assert Resources().accelerator_choices() == []
    assert Resources(memory="512MB").min_memory_gb == 0.5
    assert Resources(accelerators={"A100": 8}).accelerator_choices() == [("A100", 8.0)]
    assert Resources(accelerators=["L4:1", "A100"]).accelerator_choices() == [
        ("L4", 1.0),
        ("A100", 1.0),
    ]


# -------------------------------------------------------------------- bad values

NAME_RULE = (
    "is not a valid service name: use 1-63 lowercase letters, digits, '-' or '_',"
    " starting and ending with a letter or digit"
)
SCALAR = 'must be a string, number or boolean (null is not allowed; use "" for empty)'
CPUS = 'must be a positive number of CPUs, optionally with + (like 2 or "4+")'
ACCEL = 'must be like "T4:1", a mapping like {T4: 1}, or a list like ["L4:1", "A10G:1"]'
PORTS = "must be a port, a range like 10052-10100, or a list of them"
SURGE = 'must be an integer >= 0 or a percentage like "25%"'
UNAVAILABLE = 'must be an integer >= 0 or a percentage from "0%" to "100%"'
URL_PATH = "must be a URL path starting with /"
LAST_WEIGHT = "the last weight must be 100 (a canary ends with all traffic on the new version)"
ONE_KIND = "canary.steps[0]: a step is one of weight: N, pause: seconds or shadow: N (exactly one)"

TOP_CASES: list[tuple[dict[Any, Any], str]] = [
    ({"name": "Http-Server"}, f"name: 'Http-Server' {NAME_RULE}"),
    ({"name": "-abc"}, f"name: '-abc' {NAME_RULE}"),
    ({"name": "a" * 64}, f"name: '{'a' * 64}' {NAME_RULE}"),
    ({"name": 5}, "name: must be a string"),
    ({"envs": [1]}, "envs: must be a mapping"),
    ({"envs": {"A": None}}, f"envs.A: {SCALAR}"),
    ({"envs": {"A": [1]}}, f"envs.A: {SCALAR}"),
    ({"envs": {"A": "x\x00y"}}, "envs.A: must not contain a NUL byte (\\0)"),
    ({"run": "echo\x00"}, "run: must not contain a NUL byte (\\0)"),
    ({"run": "x", "setup": "a\x00"}, "setup: must not contain a NUL byte (\\0)"),
    (
        {"envs": {"1A": "x"}},
        "envs.1A: not a valid environment variable name (letters, digits and _, no leading digit)",
    ),
    ({"workdir": ""}, "workdir: must be a non-empty string"),
    ({"setup": 3}, "setup: must be a string"),
    ({"setup": datetime.date(2020, 1, 1)}, "setup: must be a string"),
    ({"run": ""}, "run: must be a non-empty command"),
    ({"run": ["a"]}, "run: must be a non-empty command"),
    ({"num_nodes": 2}, "num_nodes: must be 1 (each replica runs on a single node)"),
    ({"file_mounts": []}, "file_mounts: must be a mapping"),
    (
        {"file_mounts": {"/d": datetime.date(2020, 1, 1)}},
        "file_mounts: must be JSON data: a date value is not JSON",
    ),
    ({"service": 3}, "service: must be a mapping"),
    ({"resources": "big"}, "resources: must be a mapping"),
    ({"rnu": "x"}, "rnu: unknown field (did you mean run?)"),
    ({"replicas": 2}, "replicas: unknown field (did you mean service.replicas?)"),
    ({"xyzzy": 1}, "xyzzy: unknown field"),
    ({"command": "x"}, "command: unknown field (did you mean run?)"),
    ({1: 2}, "(top level): field names must be strings (got 1)"),
]

SERVICE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"readiness_probe": "health"}, f"readiness_probe.path: {URL_PATH}"),
    ({"readiness_probe": 5}, "readiness_probe: must be a URL path or a mapping with path:"),
    ({"readiness_probe": {"pth": "/"}}, "readiness_probe.pth: unknown field (did you mean path?)"),
    (
        {"readiness_probe": {"initial_delay_seconds": -1}},
        "readiness_probe.initial_delay_seconds: must be a number >= 0",
    ),
    (
        {"readiness_probe": {"timeout_seconds": 0}},
        "readiness_probe.timeout_seconds: must be a number > 0",
    ),
    (
        {"readiness_probe": {"post_data": {"when": datetime.date(2020, 1, 1)}}},
        "readiness_probe.post_data: must be JSON data: a date value is not JSON",
    ),
    ({"readiness_probe": {"headers": {"X": None}}}, f"readiness_probe.headers.X: {SCALAR}"),
    (
        {"readiness_probe": {"headers": {"bad header": "x"}}},
        'readiness_probe.headers["bad header"]: not a valid HTTP header name',
    ),
    ({"replicas": -1}, "replicas: must be an integer >= 0"),
    ({"replicas": "2"}, "replicas: must be an integer >= 0"),
    ({"replicas": True}, "replicas: must be an integer >= 0"),
    ({"replicas": 1.5}, "replicas: must be an integer >= 0"),
    ({"replica": 2}, "replica: unknown field (did you mean replicas?)"),
    (
        {"replicas": 2, "replica_policy": {"min_replicas": 1}},
        "(service): replicas and replica_policy are mutually exclusive"
        " (a fixed count, or autoscaling bounds)",
    ),
    ({"replica_policy": {}}, "replica_policy.min_replicas: required"),
    ({"replica_policy": 3}, "replica_policy: must be a mapping"),
    (
        {"replica_policy": {"min_replicas": 1, "max_replica": 3}},
        "replica_policy.max_replica: unknown field (did you mean max_replicas?)",
    ),
    (
        {"replica_policy": {"min_replicas": 3, "max_replicas": 2}},
        "replica_policy.max_replicas: must be an integer >= min_replicas",
    ),
    (
        {"replica_policy": {"min_replicas": 1, "max_replicas": 3}},
        "replica_policy: max_replicas > min_replicas needs an autoscaling target:"
        " target_qps_per_replica or target_ongoing_requests",
    ),
    (
        {
            "replica_policy": {
                "min_replicas": 1,
                "target_qps_per_replica": 1,
                "target_ongoing_requests": 2,
            }
        },
        "replica_policy: target_qps_per_replica and target_ongoing_requests are mutually"
        " exclusive (pick SkyServe's or Ray Serve's autoscaling policy)",
    ),
    (
        {"replica_policy": {"min_replicas": 1, "target_qps_per_replica": 0}},
        "replica_policy.target_qps_per_replica: must be a number > 0",
    ),
    (
        {"replica_policy": {"min_replicas": 1, "target_ongoing_requests": -2}},
        "replica_policy.target_ongoing_requests: must be a number > 0",
    ),
    (
        {"replica_policy": {"min_replicas": 1, "upscale_delay_seconds": -1}},
        "replica_policy.upscale_delay_seconds: must be a number >= 0",
    ),
    (
        {"replica_policy": {"min_replicas": 1, "look_back_period_s": 0}},
        "replica_policy.look_back_period_s: must be a number > 0",
    ),
    (
        {"replica_policy": {"min_replicas": 1, "downscale_delay_s": "soon"}},
        "replica_policy.downscale_delay_s: must be a number >= 0",
    ),
    ({"update_mode": "fast"}, "update_mode: must be one of rolling, blue_green, canary"),
    ({"update_deadline_s": 0}, "update_deadline_s: must be a number > 0"),
    ({"update_deadline_s": float("inf")}, "update_deadline_s: must be a number > 0"),
    ({"rolling_update": {"max_surge": -1}}, f"rolling_update.max_surge: {SURGE}"),
    ({"rolling_update": {"max_surge": "x%"}}, f"rolling_update.max_surge: {SURGE}"),
    (
        {"rolling_update": {"max_unavailable": "150%"}},
        f"rolling_update.max_unavailable: {UNAVAILABLE}",
    ),
    (
        {"rolling_update": {"max_surge": 0, "max_unavailable": "0%"}},
        "rolling_update: max_surge and max_unavailable cannot both be 0"
        " (an update could never progress)",
    ),
    ({"canary": {"steps": []}}, "canary.steps: must not be empty"),
    ({"canary": {"steps": [{"shadow": 50, "weight": 100}]}}, ONE_KIND),
    (
        {"canary": {"steps": [{"shadow": 0}, {"weight": 100}]}},
        "canary.steps[0].shadow: must be an integer from 1 to 100"
        " (percent of the requests mirrored)",
    ),
    (
        {"canary": {"steps": [{"weight": 10}, {"shadow": 50}, {"weight": 100}]}},
        "canary.steps: a shadow step must come before the first weight above 0 (once clients"
        " reach the new version there is nothing left to shadow)",
    ),
    (
        {"canary": {"shadow": {"ignore": ["timestamp"]}}},
        "canary.shadow.ignore[0]: 'timestamp' is not a JSON path like $.field,"
        ' $.list[*].field or $["odd key"]',
    ),
    (
        {"canary": {"shadow": {"methods": ["get"]}}},
        "canary.shadow.methods[0]: must be an HTTP method in capitals (GET, POST...)",
    ),
    (
        {"canary": {"shadow": {"max_body_bytes": 10**9}}},
        "canary.shadow.max_body_bytes: must be an integer from 0 to 262144 (bytes)",
    ),
    (
        {"canary": {"shadow": {"headers": ["bad header"]}}},
        "canary.shadow.headers[0]: not a valid HTTP header name",
    ),
    (
        {"canary": {"shadow": {"noise_share": 2}}},
        "canary.shadow.noise_share: must be a number from 0 to 1",
    ),
    (
        {"canary": {"analysis": {"max_shadow_diff_rate": -1}}},
        "canary.analysis.max_shadow_diff_rate: must be a number from 0 to 1",
    ),
    ({"canary": {"steps": "all"}}, "canary.steps: must be a list"),
    ({"canary": {"steps": [{"weight": 50}]}}, f"canary.steps: {LAST_WEIGHT}"),
    ({"canary": {"steps": [{"pause": 5}]}}, f"canary.steps: {LAST_WEIGHT}"),
    (
        {"canary": {"steps": [{"weight": 101}]}},
        "canary.steps[0].weight: must be an integer from 0 to 100",
    ),
    (
        {"canary": {"steps": [{"weight": 10}, {"pause": -1}]}},
        "canary.steps[1].pause: must be seconds >= 0, or {} to wait for steady promote",
    ),
    (
        {"canary": {"steps": [{"wieght": 100}]}},
        "canary.steps[0].wieght: unknown field (did you mean weight?)",
    ),
    (
        {"canary": {"steps": [{}]}},
        ONE_KIND,
    ),
    (
        {"canary": {"steps": [{"weight": 100, "pause": 1}]}},
        ONE_KIND,
    ),
    (
        {"canary": {"analysis": {"max_error_rate": 2}}},
        "canary.analysis.max_error_rate: must be a number from 0 to 1",
    ),
    (
        {"canary": {"analysis": {"max_p99_latency_ms": 0}}},
        "canary.analysis.max_p99_latency_ms: must be a number > 0",
    ),
    (
        {"canary": {"analysis": {"min_requests": -1}}},
        "canary.analysis.min_requests: must be an integer >= 0",
    ),
    ({"max_ongoing_requests": 0}, "max_ongoing_requests: must be an integer >= 1"),
    ({"max_queued_requests": -2}, "max_queued_requests: must be an integer >= -1"),
    (
        {"load_balancing_policy": "random"},
        "load_balancing_policy: must be one of least_load, round_robin, power_of_two,"
        " instance_aware_least_load, prefix_affinity, session_affinity",
    ),
    (
        {"load_balancing_policy": "session_affinity"},
        "service: load_balancing_policy session_affinity needs load_balancer.affinity_key"
        ' (like "header:X-Session-ID")',
    ),
    (
        {"load_balancer": {"affinity_key": "header:"}},
        'load_balancer.affinity_key: must be "header:NAME", "cookie:NAME" or "json:/pointer"'
        " (like header:X-Session-ID)",
    ),
    (
        {"load_balancer": {"prefix_affinity": {"block_bytes": 0}}},
        "load_balancer.prefix_affinity.block_bytes: must be an integer >= 1",
    ),
    (
        {"load_balancer": {"replica_metrics": {"timeout_s": 0}}},
        "load_balancer.replica_metrics.timeout_s: must be a number > 0",
    ),
    ({"graceful_shutdown_wait_loop_s": 0}, "graceful_shutdown_wait_loop_s: must be a number > 0"),
    ({"graceful_shutdown_timeout_s": -1}, "graceful_shutdown_timeout_s: must be a number >= 0"),
    ({"health_check_period_s": 0}, "health_check_period_s: must be a number > 0"),
    ({"health_check_timeout_s": False}, "health_check_timeout_s: must be a number > 0"),
    ({"user_config": {1: 2}}, "user_config: must be JSON data: mapping keys must be strings"),
    ({"user_config": [float("nan")]}, "user_config: must be JSON data: numbers must be finite"),
    ({"reconfigure_path": "reconfigure"}, f"reconfigure_path: {URL_PATH}"),
    ({"port": 0}, "port: must be an integer from 1 to 65535"),
    ({"port": 70000}, "port: must be an integer from 1 to 65535"),
    ({"port": "8080"}, "port: must be an integer from 1 to 65535"),
]

RESOURCE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"cpus": 0}, f"cpus: {CPUS}"),
    ({"cpus": "-1"}, f"cpus: {CPUS}"),
    ({"cpus": True}, f"cpus: {CPUS}"),
    (
        {"memory": "4XB"},
        "memory: must be a positive size in GB, optionally with a unit or +"
        ' (like 4, "4+", "512MB")',
    ),
    ({"accelerators": "T4:0"}, f"accelerators: {ACCEL}"),
    ({"accelerators": {"T4": 0}}, f"accelerators: {ACCEL}"),
    ({"accelerators": []}, f"accelerators: {ACCEL}"),
    ({"accelerators": 4}, f"accelerators: {ACCEL}"),
    ({"use_spot": "yes"}, "use_spot: must be true or false"),
    ({"cloud": 5}, "cloud: must be a string"),
    ({"ports": 0}, f"ports: {PORTS}"),
    ({"ports": ["10-5"]}, f"ports: {PORTS}"),
    (
        {"disk_size": "big"},
        'disk_size: must be a positive size in GB, optionally with a unit (like 256, "256GB")',
    ),
    ({"image_id": 5}, "image_id: must be a string or a mapping of region to image id"),
    ({"labels": {"team": None}}, f"labels.team: {SCALAR}"),
    ({"any_of": [{"cpu": 1}]}, "any_of[0].cpu: unknown field (did you mean cpus?)"),
    ({"any_of": {"cpus": 1}}, "any_of: must be a list"),
    ({"job_recovery": 5}, "job_recovery: must be a string or a mapping"),
    ({"gpus": "T4"}, "gpus: unknown field (did you mean accelerators?)"),
    ({"gpu_type": "T4"}, "gpu_type: unknown field"),
]


@pytest.mark.parametrize(("fields", "expected"), TOP_CASES)
def test_bad_top_level_field(fields: dict[Any, Any], expected: str) -> None:
    assert error_of({"run": "x", **fields}) == expected


@pytest.mark.parametrize(("fields", "expected"), SERVICE_CASES)
def test_bad_service_field(fields: dict[str, Any], expected: str) -> None:
    expected = expected.replace("(service)", "service", 1)
    if not expected.startswith("service:"):
        expected = "service." + expected
    assert error_of({"run": "x", "service": fields}) == expected


@pytest.mark.parametrize(("fields", "expected"), RESOURCE_CASES)
def test_bad_resource_field(fields: dict[str, Any], expected: str) -> None:
    assert error_of({"run": "x", "resources": fields}) == f"resources.{expected}"


def test_import_path_form() -> None:
    assert error_of({"import_path": "text_ml"}) == "import_path: must look like module.sub:attr"
    assert error_of({"import_path": "a b:c"}) == "import_path: must look like module.sub:attr"


def test_run_and_import_path() -> None:
    assert error_of({"run": "x", "import_path": "a:b"}) == (
        "(top level): run and import_path are mutually exclusive"
        " (a replica is a command or a Python class, not both)"
    )
    assert error_of({"setup": "pip install x"}) == (
        "(top level): one of run or import_path is required"
        " (a command to start, or a module:attr to serve)"
    )


def test_document_not_a_mapping() -> None:
    assert error_of([1]) == "(top level): must be a mapping of service fields, not a list"


def test_bad_folder_name_without_name() -> None:
    with pytest.raises(SpecError) as info:
        parse_service({"run": "x"}, base_dir=Path("/srv/My App"))
    assert str(info.value) == (
        "name: no name given, and the folder name 'my app' is not a valid service name"
        " (use 1-63 lowercase letters, digits, '-' or '_', starting and ending with a letter"
        " or digit); set name: in the file or pass a name"
    )


def test_bad_name_argument() -> None:
    with pytest.raises(SpecError, match=r"^name: 'Bad' is not a valid service name"):
        parse({"run": "x"}, name="Bad")


# ------------------------------------------------------------------ file errors


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in tmp_path so messages show the relative name the user typed."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def file_error(path: str, loader: Any = load_service_file) -> str:
    with pytest.raises(SpecError) as info:
        loader(path)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("run: x\nservice:\n  replicas: -3\n", "service.replicas: must be an integer >= 0"),
        ("run: x\nrun: y\n", "invalid YAML at line 2, column 1: duplicate key 'run'"),
        (
            "run: x\n  bad: indent\n",
            "invalid YAML at line 2, column 6: mapping values are not allowed here",
        ),
        (
            "run: x\nservice: {replicas: [1\n",
            "invalid YAML at line 3, column 1: while parsing a flow sequence,"
            " expected ',' or ']', but got '<stream end>'",
        ),
        ("", "file is empty"),
        ("# all commented out\n", "file is empty"),
        ("- run: x\n", "file must contain a mapping of service fields, not a list"),
        ("just text\n", "file must contain a mapping of service fields, not a string"),
        (
            "services: []\n",
            "services: unknown field (this looks like a fleet file; use steady deploy)",
        ),
        ("run: x\nworkdir: ./missing\n", "workdir: no such directory: {tmp}/missing"),
    ],
)
def test_service_file_errors(in_tmp: Path, text: str, expected: str) -> None:
    (in_tmp / "service.yaml").write_text(text)
    expected = expected.replace("{tmp}", str(in_tmp.resolve()))
    assert file_error("service.yaml") == f"service.yaml: {expected}"


def test_missing_file_and_directory(in_tmp: Path) -> None:
    assert file_error("nope.yaml") == "nope.yaml: no such file"
    (in_tmp / "adir").mkdir()
    assert file_error("adir") == "adir: is a directory, not a file"


def test_non_utf8_file(in_tmp: Path) -> None:
    (in_tmp / "service.yaml").write_bytes(b"run: caf\xe9\n")
    assert (
        file_error("service.yaml") == "service.yaml: is not UTF-8 text (invalid byte at offset 8)"
    )


def test_huge_file(in_tmp: Path) -> None:
    (in_tmp / "service.yaml").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    message = file_error("service.yaml")
    assert message.startswith("service.yaml: is larger than 1 MiB")
    assert "\n" not in message


def test_workdir_is_resolved_against_the_file_folder(in_tmp: Path) -> None:
    sub = in_tmp / "svc"
    (sub / "app").mkdir(parents=True)
    (in_tmp / "abs").mkdir()
    write(sub, "run: x\nworkdir: app\n")
    assert load_service_file("svc/service.yaml").workdir == str((sub / "app").resolve())
    write(sub, f"run: x\nworkdir: {in_tmp / 'abs'}\n")
    assert load_service_file("svc/service.yaml").workdir == str((in_tmp / "abs").resolve())
    (sub / "file").write_text("")
    write(sub, "run: x\nworkdir: file\n")
    assert file_error("svc/service.yaml") == (
        f"svc/service.yaml: workdir: no such directory: file (looked in the file's folder"
        f" {sub.resolve()} and the current directory {in_tmp})"
    )


def test_name_argument_in_loader(in_tmp: Path) -> None:
    write(in_tmp, "name: in-file\nrun: x\n")
    assert load_service_file("service.yaml", name="override").name == "override"


# --------------------------------------------------------------------- fleet files

FLEET = """\
services:
  - name: web
    run: python web.py
  - name: ml
    import_path: text_ml:Translator
    service: {replicas: 3}
"""


def test_fleet_file(in_tmp: Path) -> None:
    write(in_tmp, FLEET, "fleet.yaml")
    specs = load_fleet_file("fleet.yaml")
    assert [s.name for s in specs] == ["web", "ml"]
    assert specs[1].service.replicas == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("other: 1\n", "other: unknown field"),
        ("service: []\n", "service: unknown field (did you mean services?)"),
        ("services:\n", "services: required (a list of services)"),
        ("services: {name: a}\n", "services: must be a list of services"),
        ("services: []\n", "services: must not be empty"),
        ("services: [run]\n", "services[0]: must be a mapping of service fields, not a string"),
        (
            "services: [{run: x}]\n",
            "services[0].name: required (every service in a fleet file needs a name)",
        ),
        (
            "services:\n  - {name: a, run: x}\n  - {name: b, run: x, service: {replicas: -1}}\n",
            "services[1].service.replicas: must be an integer >= 0",
        ),
        (
            "services:\n  - {name: a}\n",
            "services[0]: one of run or import_path is required"
            " (a command to start, or a module:attr to serve)",
        ),
        (
            "services:\n  - {name: a, run: x}\n  - {name: a, run: y}\n",
            "services[1].name: duplicate service name 'a' (also services[0])",
        ),
        ("- 1\n", "file must contain a mapping with services: [...], not a list"),
    ],
)
def test_fleet_file_errors(in_tmp: Path, text: str, expected: str) -> None:
    (in_tmp / "fleet.yaml").write_text(text)
    assert file_error("fleet.yaml", load_fleet_file) == f"fleet.yaml: {expected}"


# ------------------------------------------------------------------ SpecError, JSON


def test_spec_error_is_one_line_and_pickles() -> None:
    error = SpecError("service.replicas", "bad\nvalue", file="s.yaml")
    assert str(error) == "s.yaml: service.replicas: bad value"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.message, copy.file) == ("service.replicas", "bad\nvalue", "s.yaml")
    assert isinstance(error, ValueError)


def test_from_json_errors() -> None:
    with pytest.raises(SpecError, match=r"^\(top level\): not valid JSON"):
        ServiceSpec.from_json("{")
    with pytest.raises(SpecError, match=r"^service\.replicas: must be an integer >= 0$"):
        ServiceSpec.from_json('{"run": "x", "service": {"replicas": -1}}')


def test_spec_json_is_canonical() -> None:
    a = parse({"run": "x", "envs": {"B": 1, "A": 2}})
    b = parse({"envs": {"A": "2", "B": "1"}, "run": "x"})
    assert a.spec_json() == b.spec_json()
    assert " " not in a.spec_json().replace('"run":"x"', "")


# -------------------------------------------------------------------- properties

FIELD_NAMES = sorted(
    {
        name
        for model in (ServiceSpec, ServiceSection, Resources, ReadinessProbe, CanaryStep)
        for name in model.model_fields
    }
    | {"min_replicas", "max_replicas", "target_qps_per_replica", "max_surge", "steps", "weight"}
)
KEYS = st.sampled_from(FIELD_NAMES) | st.text(max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["/health", "2+", "T4:1", "50%", "rolling", "a:b", "canary", "x"])
    | st.just(datetime.date(2020, 1, 1))
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=8,
)


@settings(
    max_examples=75, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.dictionaries(KEYS, VALUES, max_size=6), st.booleans())
@example({"config": {}}, True)  # a random run drew it: SkyPilot's config is never stored
def test_random_documents_only_raise_spec_error(data: dict[str, Any], add_run: bool) -> None:
    if add_run:
        data = {"run": "x", **data}
    try:
        spec = parse_service(data, base_dir=BASE)
    except SpecError as exc:
        text = str(exc)
        assert "\n" not in text and len(text.splitlines()) == 1
        assert "pydantic" not in text.lower() and "Input should" not in text
    else:
        # Every field survives storage but the two the model excludes by design
        # (``config`` is named once as not applicable, ``pool`` refused).
        stored = spec.model_copy(update={"config": None, "pool": None})
        assert ServiceSpec.from_json(spec.spec_json()) == stored


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
TIMES = st.integers(min_value=1, max_value=3600) | st.floats(min_value=0.1, max_value=3600)


NO_NUL = st.characters(blacklist_characters="\x00")  # NUL cannot reach argv or env


@st.composite
def valid_documents(draw: st.DrawFn) -> dict[str, Any]:
    service: dict[str, Any] = {}
    if draw(st.booleans()):
        low = draw(st.integers(0, 5))
        policy: dict[str, Any] = {"min_replicas": low}
        if draw(st.booleans()):
            policy["max_replicas"] = low + draw(st.integers(1, 5))
            target = draw(st.sampled_from(["target_qps_per_replica", "target_ongoing_requests"]))
            policy[target] = draw(st.floats(min_value=0.1, max_value=100))
        service["replica_policy"] = policy
    elif draw(st.booleans()):
        service["replicas"] = draw(st.integers(0, 10))
    if draw(st.booleans()):
        service["readiness_probe"] = draw(
            st.sampled_from(["/", "/health"])
            | st.fixed_dictionaries(
                {"path": st.just("/ready")},
                optional={"post_data": JSON, "initial_delay_seconds": TIMES},
            )
        )
    service["update_mode"] = draw(st.sampled_from(["rolling", "blue_green", "canary"]))
    service["rolling_update"] = {
        "max_surge": draw(st.sampled_from([1, 2, "25%", "100%"])),
        "max_unavailable": draw(st.sampled_from([0, 1, "0%", "50%"])),
    }
    service["canary"] = {
        "steps": [{"weight": draw(st.integers(0, 99))}, {"pause": draw(TIMES)}, {"weight": 100}]
    }
    service["health_check_period_s"] = draw(TIMES)
    service["user_config"] = draw(JSON)
    service["port"] = draw(st.none() | st.integers(1, 65535))
    doc: dict[str, Any] = {
        "name": draw(st.from_regex(NAME_PATTERN, fullmatch=True)),
        "service": service,
        "resources": {
            "cpus": draw(st.sampled_from([1, 2.5, "2+", "4"])),
            "accelerators": draw(st.sampled_from(["T4:1", {"A100": 2}, ["L4:1", "A10G"]])),
        },
        "envs": draw(
            st.dictionaries(
                st.from_regex(r"[A-Z_][A-Z0-9_]{0,5}", fullmatch=True),
                st.text(NO_NUL, max_size=5) | st.integers() | st.booleans(),
                max_size=3,
            )
        ),
    }
    if draw(st.booleans()):
        doc["run"] = draw(st.text(NO_NUL, min_size=1, max_size=10).filter(str.strip))
    else:
        doc["import_path"] = "pkg.mod:App"
    return doc


@settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(valid_documents())
def test_valid_specs_round_trip(doc: dict[str, Any]) -> None:
    spec = parse_service(doc, base_dir=BASE)
    text = spec.spec_json()
    again = ServiceSpec.from_json(text)
    assert again == spec
    assert again.spec_json() == text
    assert parse_service(spec.model_dump(), base_dir=BASE) == spec


ALIAS_BOMB = "name: bomb\nrun: x\nservice:\n  replicas: 1\n  user_config:\n" + "".join(
    f"    k{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else ', '.join(['x'] * 9)}]\n"
    for i in range(9)
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ALIAS_BOMB, "invalid YAML: aliases expand the file to more than 100,000 values"),
        (
            "run: x\nservice:\n  user_config: &a\n    self: *a\n",
            "invalid YAML: a value that contains itself (an alias to an enclosing anchor)",
        ),
    ],
)
def test_alias_bombs_are_refused_in_a_moment(in_tmp: Path, text: str, expected: str) -> None:
    """A 1 KiB file whose aliases expand to 387 million values (or to a cycle) hung
    `steady up` in validation; now it is one line, read in about a millisecond."""
    (in_tmp / "service.yaml").write_text(text)
    assert file_error("service.yaml") == f"service.yaml: {expected}"


def test_shared_anchors_within_reason_still_load(in_tmp: Path) -> None:
    text = "run: x\nenvs: &e\n  A: '1'\nservice:\n  user_config: {a: *e, b: *e}\n"
    (in_tmp / "service.yaml").write_text(text)
    spec = load_service_file("service.yaml")
    assert spec.service.user_config == {"a": {"A": "1"}, "b": {"A": "1"}}
