"""The change classifier: every field lands on the side docs/design.md puts it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from steadyserve.spec import ServiceSpec, parse_service
from steadyserve.spec.changes import ChangeSet, FieldChange, classify

BASE: dict[str, Any] = {
    "name": "svc",
    "service": {"replicas": 2, "readiness_probe": "/health"},
    "run": "python server.py --port $PORT",
}


def spec(tmp_path: Path, doc: dict[str, Any] | None = None, **top: Any) -> ServiceSpec:
    data = copy.deepcopy(BASE if doc is None else doc)
    data.update(top)
    return parse_service(data, base_dir=tmp_path)


def with_service(tmp_path: Path, base: dict[str, Any] | None = None, **fields: Any) -> ServiceSpec:
    data = copy.deepcopy(BASE if base is None else base)
    data["service"] = {**data["service"], **fields}
    return parse_service(data, base_dir=tmp_path)


def changes(
    old: ServiceSpec, new: ServiceSpec, old_hash: str | None = None, new_hash: str | None = None
) -> ChangeSet:
    return classify(old, new, old_workdir_hash=old_hash, new_workdir_hash=new_hash)


def only(change_set: ChangeSet) -> FieldChange:
    assert len(change_set.changes) == 1, change_set.changes
    return change_set.changes[0]


def test_identical_specs_are_no_change(tmp_path: Path) -> None:
    result = changes(spec(tmp_path), spec(tmp_path))
    assert result.empty
    assert not result.needs_restart
    assert result.describe() == "no change"


def test_the_name_never_counts(tmp_path: Path) -> None:
    assert changes(spec(tmp_path), spec(tmp_path, name="other")).empty


def test_spellings_of_the_same_value_are_no_change(tmp_path: Path) -> None:
    # A bare probe path and its object form, 2 and 2.0 seconds: the same spec.
    old = with_service(tmp_path, readiness_probe="/health", graceful_shutdown_timeout_s=2)
    new = with_service(
        tmp_path, readiness_probe={"path": "/health"}, graceful_shutdown_timeout_s=2.0
    )
    assert changes(old, new).empty


IN_PLACE: list[tuple[str, Any]] = [
    ("replicas", 3),
    ("max_ongoing_requests", 5),
    ("max_queued_requests", 10),
    ("load_balancing_policy", "round_robin"),
    ("graceful_shutdown_wait_loop_s", 1),
    ("graceful_shutdown_timeout_s", 5),
    ("health_check_period_s", 3),
    ("health_check_timeout_s", 7),
    ("readiness_probe", "/ready"),
    ("readiness_probe", {"path": "/health", "initial_delay_seconds": 5}),
    ("readiness_probe", {"path": "/health", "headers": {"X-Probe": "1"}}),
    ("update_mode", "blue_green"),
    ("update_deadline_s", 60),
    ("rolling_update", {"max_surge": 1, "max_unavailable": 0}),
    ("canary", {"steps": [{"weight": 50}, {"weight": 100}]}),
]


@pytest.mark.parametrize(("field", "value"), IN_PLACE)
def test_in_place_fields(tmp_path: Path, field: str, value: Any) -> None:
    change = only(changes(spec(tmp_path), with_service(tmp_path, **{field: value})))
    assert change.path == f"service.{field}"
    assert change.kind == "in_place"
    assert not changes(spec(tmp_path), with_service(tmp_path, **{field: value})).needs_restart


def test_replica_count_to_policy_and_back_is_in_place(tmp_path: Path) -> None:
    old = spec(tmp_path)
    doc = copy.deepcopy(BASE)
    policy = {"min_replicas": 1, "max_replicas": 3, "target_qps_per_replica": 2}
    doc["service"] = {"readiness_probe": "/health", "replica_policy": policy}
    new = spec(tmp_path, doc)
    result = changes(old, new)
    assert [(c.path, c.kind) for c in result.changes] == [
        ("service.replicas", "in_place"),
        ("service.replica_policy", "in_place"),
    ]
    assert [c.kind for c in changes(new, old).changes] == ["in_place", "in_place"]
    bigger = copy.deepcopy(doc)
    bigger["service"]["replica_policy"]["max_replicas"] = 5
    change = only(changes(new, spec(tmp_path, bigger)))
    assert (change.path, change.kind) == ("service.replica_policy", "in_place")
    assert change.old["max_replicas"] == 3  # type: ignore[index]
    assert change.new["max_replicas"] == 5  # type: ignore[index]


RESTART_TOP: list[tuple[str, Any]] = [
    ("run", "python other.py --port $PORT"),
    ("setup", "pip install -r requirements.txt"),
    ("resources", {"cpus": 2}),
    ("envs", {"MODEL": "small"}),
    ("file_mounts", {"/data": "."}),  # a local source, resolved from the file's folder
]


@pytest.mark.parametrize(("field", "value"), RESTART_TOP)
def test_restart_fields(tmp_path: Path, field: str, value: Any) -> None:
    result = changes(spec(tmp_path), spec(tmp_path, **{field: value}))
    change = only(result)
    assert change.path.split(".")[0] == field
    assert change.kind == "restart"
    assert result.needs_restart


def test_import_path_is_a_restart(tmp_path: Path) -> None:
    doc = {"name": "svc", "import_path": "app:Model"}
    result = changes(spec(tmp_path, doc), spec(tmp_path, doc, import_path="app:Other"))
    change = only(result)
    assert (change.path, change.old, change.new, change.kind) == (
        "import_path",
        "app:Model",
        "app:Other",
        "restart",
    )
    # From a command to a Python replica: both fields change, both restart.
    result = changes(spec(tmp_path), spec(tmp_path, doc))
    assert {(c.path, c.kind) for c in result.changes} >= {
        ("run", "restart"),
        ("import_path", "restart"),
    }


def test_envs_are_reported_per_key(tmp_path: Path) -> None:
    old = spec(tmp_path, envs={"MODEL": "small", "KEEP": "1", "GONE": "x"})
    new = spec(tmp_path, envs={"MODEL": "large", "KEEP": "1", "ADDED": "y"})
    result = changes(old, new)
    assert [(c.path, c.old, c.new, c.kind) for c in result.changes] == [
        ("envs.MODEL", "small", "large", "restart"),
        ("envs.GONE", "x", None, "restart"),
        ("envs.ADDED", None, "y", "restart"),
    ]


def test_resources_are_reported_per_key(tmp_path: Path) -> None:
    old = spec(tmp_path, resources={"cpus": 2, "memory": 4})
    new = spec(tmp_path, resources={"cpus": "4+", "memory": 4})
    change = only(changes(old, new))
    assert (change.path, change.old, change.new, change.kind) == (
        "resources.cpus",
        2,
        "4+",
        "restart",
    )


def test_reconfigure_path_is_a_restart(tmp_path: Path) -> None:
    old = with_service(tmp_path, reconfigure_path="/-/reconfigure")
    new = with_service(tmp_path, reconfigure_path="/-/config")
    change = only(changes(old, new))
    assert (change.path, change.kind) == ("service.reconfigure_path", "restart")
    assert only(changes(spec(tmp_path), old)).kind == "restart"


def test_port_cannot_change_in_an_update(tmp_path: Path) -> None:
    change = only(changes(with_service(tmp_path, port=30001), with_service(tmp_path, port=30002)))
    assert (change.path, change.kind) == ("service.port", "restart")
    assert change.why == "the endpoint port cannot change in an update"


# ------------------------------------------------------------------------ user_config


def test_user_config_of_a_python_replica_is_in_place(tmp_path: Path) -> None:
    doc = {"name": "svc", "import_path": "app:Model", "service": {"user_config": {"t": 0.5}}}
    new_doc = {**doc, "service": {"user_config": {"t": 0.7}}}
    change = only(changes(spec(tmp_path, doc), spec(tmp_path, new_doc)))
    assert (change.path, change.old, change.new) == ("service.user_config", {"t": 0.5}, {"t": 0.7})
    assert change.kind == "in_place"
    assert change.why == "delivered through reconfigure()"


def test_user_config_of_a_command_replica_with_reconfigure_path_is_in_place(
    tmp_path: Path,
) -> None:
    old = with_service(tmp_path, reconfigure_path="/-/reconfigure", user_config={"a": 1})
    new = with_service(tmp_path, reconfigure_path="/-/reconfigure", user_config={"a": 2})
    change = only(changes(old, new))
    assert (change.path, change.kind) == ("service.user_config", "in_place")


def test_user_config_of_a_command_replica_without_reconfigure_path_restarts(
    tmp_path: Path,
) -> None:
    old = with_service(tmp_path, user_config={"a": 1})
    new = with_service(tmp_path, user_config={"a": 2})
    result = changes(old, new)
    change = only(result)
    assert (change.path, change.kind) == ("service.user_config", "restart")
    assert change.why == "no reconfigure_path: command replicas restart"
    assert result.needs_restart


def test_user_config_follows_the_new_specs_reconfigure_path(tmp_path: Path) -> None:
    # Dropping reconfigure_path: the new version cannot take user_config in place.
    old = with_service(tmp_path, reconfigure_path="/-/reconfigure", user_config={"a": 1})
    new = with_service(tmp_path, user_config={"a": 2})
    result = changes(old, new)
    assert {(c.path, c.kind) for c in result.changes} == {
        ("service.user_config", "restart"),
        ("service.reconfigure_path", "restart"),
    }


def test_user_config_added_or_removed_counts(tmp_path: Path) -> None:
    doc = {"name": "svc", "import_path": "app:Model"}
    with_config = {**doc, "service": {"user_config": {"a": 1}}}
    change = only(changes(spec(tmp_path, doc), spec(tmp_path, with_config)))
    assert (change.old, change.new, change.kind) == (None, {"a": 1}, "in_place")
    change = only(changes(spec(tmp_path, with_config), spec(tmp_path, doc)))
    assert (change.old, change.new, change.kind) == ({"a": 1}, None, "in_place")


def test_user_config_values_are_compared_as_json(tmp_path: Path) -> None:
    # true and 1 are equal in Python, but a replica sees different JSON.
    old = with_service(tmp_path, reconfigure_path="/c", user_config={"flag": True})
    new = with_service(tmp_path, reconfigure_path="/c", user_config={"flag": 1})
    assert only(changes(old, new)).path == "service.user_config"


# --------------------------------------------------------------------------- workdir


def workdir_spec(tmp_path: Path, name: str) -> ServiceSpec:
    (tmp_path / name).mkdir(exist_ok=True)
    return spec(tmp_path, workdir=name)


def test_workdir_path_change_with_same_content_is_no_change(tmp_path: Path) -> None:
    old, new = workdir_spec(tmp_path, "a"), workdir_spec(tmp_path, "b")
    assert changes(old, new, "h1", "h1").empty


def test_workdir_same_path_new_content_restarts(tmp_path: Path) -> None:
    old = workdir_spec(tmp_path, "a")
    result = changes(old, old, "h1", "h2")
    change = only(result)
    assert (change.path, change.old, change.new, change.kind) == ("workdir", "h1", "h2", "restart")
    assert change.why == "workdir content changed"
    assert result.describe() == "workdir (restart)"


def test_workdir_added_or_removed_restarts(tmp_path: Path) -> None:
    with_dir = workdir_spec(tmp_path, "a")
    change = only(changes(spec(tmp_path), with_dir, new_hash="h1"))
    assert (change.old, change.new, change.why) == (None, "h1", "workdir added")
    change = only(changes(with_dir, spec(tmp_path), old_hash="h1"))
    assert (change.old, change.new, change.why) == ("h1", None, "workdir removed")


def test_workdir_with_an_unknown_hash_falls_back_to_the_path(tmp_path: Path) -> None:
    old, new = workdir_spec(tmp_path, "a"), workdir_spec(tmp_path, "b")
    assert changes(old, old).empty
    assert only(changes(old, new)).kind == "restart"
    assert only(changes(old, old, old_hash="h1")).kind == "restart"  # never assumed unchanged


# -------------------------------------------------------------------------- describe


def test_describe_mixes_in_place_and_restart(tmp_path: Path) -> None:
    old = spec(tmp_path)
    new = with_service(tmp_path, replicas=3)
    new = new.model_copy(update={"run": "python other.py"})
    result = changes(old, new)
    assert result.needs_restart
    assert result.describe() == "service.replicas 2->3 (in place); run (restart)"


def test_describe_shows_short_scalars_and_hides_secrets(tmp_path: Path) -> None:
    old = spec(tmp_path, envs={"TOKEN": "secret-1"})
    new = with_service(
        tmp_path,
        spec(tmp_path, envs={"TOKEN": "secret-2"}).model_dump(mode="json"),
        load_balancing_policy="round_robin",
        update_deadline_s=60,
        user_config={"api_key": "k"},
        reconfigure_path="/c",
    )
    text = changes(old, new).describe()
    assert text == (
        "service.update_deadline_s 600->60 (in place); "
        "service.load_balancing_policy least_load->round_robin (in place); "
        "service.user_config (in place); "
        "service.reconfigure_path unset->/c (restart); "
        "envs.TOKEN (restart)"
    )
    assert "secret" not in text
    assert "\n" not in text


def test_secrets_are_per_key_and_never_described(tmp_path: Path) -> None:
    old = spec(tmp_path, secrets={"HF_TOKEN": "hf_first_value"})
    new = spec(tmp_path, secrets={"HF_TOKEN": "hf_second_value"})
    result = changes(old, new)
    change = only(result)
    assert (change.path, change.kind) == ("secrets.HF_TOKEN", "restart")
    assert result.describe() == "secrets.HF_TOKEN (restart)"
