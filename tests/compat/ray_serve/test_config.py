"""Ray Serve config files -> services: the Ray docs' text_ml config, every key
mapped or named, and the update classifier following Ray Serve's lists."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from steadyserve.compat.formats import load_deploy_file
from steadyserve.compat.ray_serve import translate
from steadyserve.spec import SpecError
from steadyserve.spec.changes import classify
from steadyserve.spec.loading import read_document

# The Ray docs' serve_config.yaml for the text_ml example (serve build output).
RAY_DOCS_CONFIG = """\
proxy_location: EveryNode
http_options:
  host: 0.0.0.0
  port: 8000
grpc_options:
  port: 9000
  grpc_servicer_functions: []
logging_config:
  encoding: TEXT
  log_level: INFO
  logs_dir: null
  enable_access_log: true
applications:
- name: app1
  route_prefix: /
  import_path: text_ml:app
  runtime_env: {}
  deployments:
  - name: Translator
    num_replicas: 1
    user_config:
      language: french
  - name: Summarizer
    num_replicas: 1
"""


def graph(
    import_path: str, workdir: Path, args: Mapping[str, Any], *_: Any
) -> list[dict[str, Any]]:
    """What ``python -m steadyserve.serve.graph text_ml:app`` prints (docs/ray-serve-api.md)."""
    assert import_path == "text_ml:app"
    return [
        {
            "name": "Summarizer",
            "class_path": "text_ml:app",
            "options": {},
            "ingress": True,
            "init_args": [{"__steady_handle__": "Translator"}],
            "init_kwargs": {},
        },
        {
            "name": "Translator",
            "class_path": "text_ml:app.Translator",
            "options": {"user_config": {"language": "english"}},
            "ingress": False,
        },
    ]


def load(text: str, tmp_path: Path) -> Any:
    return translate(yaml.safe_load(text), tmp_path, graph)


def test_the_ray_docs_config_becomes_one_service_per_deployment(tmp_path: Path) -> None:
    out = load(RAY_DOCS_CONFIG, tmp_path)
    specs = {s.name: s for s in out.specs}
    assert set(specs) == {"app1-translator", "app1-summarizer"}
    translator, summarizer = specs["app1-translator"], specs["app1-summarizer"]
    assert translator.import_path == "text_ml:app.Translator"
    assert summarizer.import_path == "text_ml:app"
    assert translator.service.user_config == {"language": "french"}  # the config wins
    assert translator.service.replicas == 1
    assert translator.application == "app1"
    assert translator.service.route_prefix is None
    assert summarizer.service.route_prefix == "/"  # the ingress only
    # Handles reach the service that runs a deployment (the runner reads this).
    services = '{"Summarizer":"app1-summarizer","Translator":"app1-translator"}'
    assert translator.envs["STEADY_GRAPH_SERVICES"] == services
    assert out.gateway_port == 8000
    # Every top-level key beside applications is named once.
    for key in ("proxy_location", "http_options.host", "grpc_options", "logging_config"):
        assert sum(n.startswith(key) for n in out.notices) == 1, out.notices


def test_http_options_request_timeout_s_is_the_gateways(tmp_path: Path) -> None:
    """Ray's proxy answers 408 past ``http_options.request_timeout_s``: the gateway's
    own timeout, with no notice; a timeout that is not a number is a mistake."""
    timed = RAY_DOCS_CONFIG.replace("  port: 8000\n", "  port: 8000\n  request_timeout_s: 2.5\n")
    out = load(timed, tmp_path)
    assert out.gateway_timeout == 2.5
    assert not [n for n in out.notices if "request_timeout_s" in n]
    assert load(RAY_DOCS_CONFIG, tmp_path).gateway_timeout is None
    with pytest.raises(SpecError, match=r"http_options\.request_timeout_s: must be seconds"):
        load(timed.replace("2.5", "soon"), tmp_path)


def test_deployment_overrides_map_onto_service_fields(tmp_path: Path) -> None:
    text = RAY_DOCS_CONFIG.replace(
        "  - name: Summarizer\n    num_replicas: 1\n",
        """\
  - name: Summarizer
    num_replicas: auto
    autoscaling_config: {max_replicas: 4}
    max_ongoing_requests: 7
    max_queued_requests: 20
    graceful_shutdown_wait_loop_s: 0.5
    graceful_shutdown_timeout_s: 3
    health_check_period_s: 2
    health_check_timeout_s: 4
    ray_actor_options: {num_cpus: 2, num_gpus: 1, memory: 1073741824}
    placement_group_bundles: [{CPU: 1}]
""",
    )
    summarizer = {s.name: s for s in load(text, tmp_path).specs}["app1-summarizer"]
    svc = summarizer.service
    assert svc.replica_policy is not None and svc.replica_policy.max_replicas == 4
    assert svc.replica_policy.target_ongoing_requests == 2
    assert (svc.max_ongoing_requests, svc.max_queued_requests) == (7, 20)
    assert (svc.graceful_shutdown_wait_loop_s, svc.graceful_shutdown_timeout_s) == (0.5, 3)
    assert (svc.health_check_period_s, svc.health_check_timeout_s) == (2, 4)
    assert summarizer.resources.cpus == 2
    assert summarizer.resources.accelerators == {"GPU": 1}
    assert summarizer.resources.min_memory_gb == 1.0
    assert summarizer.ray_options["placement_group_bundles"] == [{"CPU": 1}]


def changes(before: str, after: str, tmp_path: Path) -> dict[str, str]:
    old = {s.name: s for s in load(before, tmp_path).specs}
    new = {s.name: s for s in load(after, tmp_path).specs}
    found = {}
    for name in new:
        for change in classify(
            old[name], new[name], old_workdir_hash=None, new_workdir_hash=None
        ).changes:
            found[f"{name}:{change.path}"] = change.kind
    return found


@pytest.mark.parametrize(
    ("override", "path", "kind"),
    [
        ("num_replicas: 3", "service.replicas", "in_place"),
        ("user_config: {language: german}", "service.user_config", "in_place"),
        ("max_ongoing_requests: 5", "service.max_ongoing_requests", "in_place"),
        ("graceful_shutdown_timeout_s: 9", "service.graceful_shutdown_timeout_s", "in_place"),
        ("health_check_period_s: 3", "service.health_check_period_s", "in_place"),
        ("ray_actor_options: {num_cpus: 0.5}", "ray_options", "restart"),
        ("placement_group_strategy: SPREAD", "ray_options", "restart"),
    ],
)
def test_classifier_follows_ray_serves_lists(
    tmp_path: Path, override: str, path: str, kind: str
) -> None:
    after = RAY_DOCS_CONFIG.replace(
        "  - name: Summarizer\n    num_replicas: 1\n", f"  - name: Summarizer\n    {override}\n"
    )
    found = changes(RAY_DOCS_CONFIG, after, tmp_path)
    assert found.get(f"app1-summarizer:{path}") == kind, found


def test_application_level_import_path_and_runtime_env_restart(tmp_path: Path) -> None:
    after = RAY_DOCS_CONFIG.replace("runtime_env: {}", "runtime_env: {env_vars: {A: b}}")
    found = changes(RAY_DOCS_CONFIG, after, tmp_path)
    assert found["app1-translator:envs.A"] == "restart"
    assert found["app1-translator:ray_options"] == "restart"
    moved = RAY_DOCS_CONFIG.replace("route_prefix: /\n", "route_prefix: /text\n")
    assert changes(RAY_DOCS_CONFIG, moved, tmp_path) == {
        "app1-summarizer:service.route_prefix": "in_place"
    }


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (
            ("proxy_location:", "proxy_locaton:"),
            "proxy_locaton: unknown field (did you mean proxy_location?)",
        ),
        (("  import_path: text_ml:app\n", ""), "applications[0].import_path: required"),
        (("route_prefix: /\n", "route_prefix: /a/\n"), "applications[0].route_prefix"),
        (
            ("    num_replicas: 1\n    user", "    num_replica: 1\n    user"),
            "applications[0].deployments[0].num_replica: unknown field",
        ),
        (("- name: Summarizer", "- name: Sumarizer"), "no deployment named 'Sumarizer'"),
        (("  port: 8000", "  port: 80000"), "http_options.port: must be a port"),
        (
            ("runtime_env: {}", "runtime_env: {working_dir: nowhere}"),
            "runtime_env.working_dir: no such",
        ),
        (("runtime_env: {}", "runtime_env: {working_dir: 's3://b/x.zip'}"), "must be a local"),
    ],
)
def test_mistakes_name_the_field(tmp_path: Path, edit: tuple[str, str], where: str) -> None:
    text = RAY_DOCS_CONFIG.replace(*edit)
    assert text != RAY_DOCS_CONFIG
    with pytest.raises(SpecError) as info:
        load(text, tmp_path)
    assert where in " ".join(info.value.lines())


def test_two_applications_cannot_share_a_route_prefix(tmp_path: Path) -> None:
    data = yaml.safe_load(RAY_DOCS_CONFIG)
    data["applications"].append({**data["applications"][0], "name": "app2"})
    with pytest.raises(SpecError, match="duplicate route_prefix '/'"):
        translate(data, tmp_path, graph)


def test_without_a_graph_describer_the_import_path_is_the_deployment(tmp_path: Path) -> None:
    path = tmp_path / "serve_config.yaml"
    path.write_text(
        "applications:\n- name: Hello World\n  route_prefix: /hi\n  import_path: app:Hello\n"
        "  runtime_env: {pip: [requests], conda: env}\n"
    )
    out = translate(read_document(path), tmp_path, lambda *_: None)
    (spec,) = out.specs
    assert spec.name == "hello-world-hello" and spec.import_path == "app:Hello"
    assert spec.service.route_prefix == "/hi"
    assert any(".conda: does not apply here" in n for n in out.notices)
    assert any(".pip:" in n for n in out.notices) or spec.model_dump().get("pip") == ["requests"]


def test_fleet_files_take_a_gateway_port(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "gateway: {port: 8100}\nservices:\n- name: a\n  run: x\n  service: {route_prefix: /a}\n"
    )
    out = load_deploy_file(path)
    assert (out.gateway_port, out.scope, out.specs[0].service.route_prefix) == (8100, "all", "/a")
    path.write_text("services:\n- name: a\n  run: x\n  service: {route_prefix: /a}\n")
    with pytest.raises(SpecError, match="gateway: required"):
        load_deploy_file(path)


def test_logging_config_enable_access_log_sets_the_services_access_log(tmp_path: Path) -> None:
    """Ray Serve's ``enable_access_log`` (the docs' config sets it at the top) turns
    on each service's access log; an application's own logging_config wins; the
    keys that do not apply are named once (they used to be ignored as a whole)."""
    out = load(RAY_DOCS_CONFIG, tmp_path)
    assert all(s.service.access_log for s in out.specs)
    [notice] = [n for n in out.notices if n.startswith("logging_config")]
    assert notice.startswith("logging_config: encoding, log_level, logs_dir do not apply here")
    off = RAY_DOCS_CONFIG.replace(
        "  route_prefix: /\n", "  route_prefix: /\n  logging_config: {enable_access_log: false}\n"
    )
    assert not any(s.service.access_log for s in load(off, tmp_path).specs)
    unset = RAY_DOCS_CONFIG.replace("  enable_access_log: true\n", "")
    assert not any(s.service.access_log for s in load(unset, tmp_path).specs)


def test_a_deployments_own_logging_config_sets_its_service_and_wins(tmp_path: Path) -> None:
    """Per deployment, as Ray Serve allows: that deployment's service only, over
    the application's and the top level's; other keys named, a bad value one line."""
    text = RAY_DOCS_CONFIG.replace(
        "  - name: Translator\n",
        "  - name: Translator\n    logging_config: {enable_access_log: false, log_level: DEBUG}\n",
    )
    out = load(text, tmp_path)
    by_name = {s.name: s.service.access_log for s in out.specs}
    assert by_name == {"app1-translator": False, "app1-summarizer": True}, by_name
    assert any(
        n.startswith("deployments[Translator].logging_config: log_level do not apply here")
        for n in out.notices
    ), out.notices
    assert not any("logging_config: does not apply" in n for n in out.notices), out.notices
    bad = text.replace("enable_access_log: false,", "enable_access_log: 3,")
    with pytest.raises(
        SpecError, match=r"deployments\[Translator\]\.logging_config\.enable_access_log"
    ):
        load(bad, tmp_path)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "logging_config: verbose",
            "logging_config: must be a mapping (Ray Serve's LoggingConfig)",
        ),
        (
            "logging_config: {enable_access_log: sometimes}",
            "logging_config.enable_access_log: must be true or false",
        ),
    ],
)
def test_a_bad_logging_config_is_one_line(tmp_path: Path, value: str, expected: str) -> None:
    text = RAY_DOCS_CONFIG.replace(
        "logging_config:\n  encoding: TEXT\n  log_level: INFO\n  logs_dir: null\n"
        "  enable_access_log: true\n",
        value + "\n",
    )
    with pytest.raises(SpecError) as info:
        load(text, tmp_path)
    assert str(info.value) == expected
