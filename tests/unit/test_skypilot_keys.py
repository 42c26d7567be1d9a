"""SkyServe task files: the path rule, every SkyPilot key, and the machine check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steadyserve.compat.skypilot import fixed_port_problem, not_applicable_notes
from steadyserve.spec import SpecError, load_fleet_file, load_service_file, parse_service
from steadyserve.spec.machine import Machine, resource_problems
from steadyserve.spec.ports import fixed_port


def _parse(data: dict[str, Any], tmp: Path, **kw: Any) -> Any:
    return parse_service(data, base_dir=tmp, **kw)


def test_workdir_from_the_current_directory_as_skypilot_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tmp_path / "examples" / "serve" / "http_server"
    app.mkdir(parents=True)
    (app / "task.yaml").write_text("workdir: examples/serve/http_server\nrun: python3 x.py\n")
    monkeypatch.chdir(tmp_path)
    notes: list[str] = []
    spec = load_service_file("examples/serve/http_server/task.yaml", notes=notes)
    assert spec.workdir == str(app.resolve())
    assert notes == [
        f"workdir: examples/serve/http_server resolved from the current directory: {app.resolve()}"
    ]


def test_workdir_in_the_file_folder_keeps_its_meaning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "svc"
    folder.mkdir()
    (folder / "service.yaml").write_text("workdir: .\nrun: x\n")
    monkeypatch.chdir(tmp_path)
    notes: list[str] = []
    assert load_service_file("svc/service.yaml", notes=notes).workdir == str(folder.resolve())
    assert notes == [f"workdir: . resolved from the file's folder: {folder.resolve()}"]


def test_fleet_files_resolve_from_their_folder_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "fleet.yaml").write_text(
        "services:\n  - name: a\n    run: x\n    workdir: app\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=r"services\[0\].workdir: no such directory: .*fleet/app"):
        load_fleet_file("fleet/fleet.yaml")


def test_tls_and_its_older_name(tmp_path: Path) -> None:
    (tmp_path / "k.pem").write_text("k")
    (tmp_path / "c.pem").write_text("c")
    spec = _parse(
        {"run": "x", "service": {"tls": {"keyfile": "k.pem", "certfile": "c.pem"}}}, tmp_path
    )
    assert spec.service.tls is not None
    assert spec.service.tls.keyfile == str(tmp_path / "k.pem")
    old = _parse({"run": "x", "service": {"https": {"key": "k.pem", "cert": "c.pem"}}}, tmp_path)
    assert old.service.tls == spec.service.tls
    with pytest.raises(SpecError, match=r"service.tls.certfile: no such file or directory"):
        _parse(
            {"run": "x", "service": {"tls": {"keyfile": "k.pem", "certfile": "no.pem"}}}, tmp_path
        )


def test_secrets_are_envs_and_null_comes_from_the_environment(tmp_path: Path) -> None:
    spec = _parse(
        {"run": "x", "secrets": {"HF_TOKEN": None, "B": "b"}}, tmp_path, environ={"HF_TOKEN": "t"}
    )
    assert spec.secrets == {"HF_TOKEN": "t", "B": "b"}
    with pytest.raises(SpecError, match=r"^secrets.HF_TOKEN: no value: .*export HF_TOKEN"):
        _parse({"run": "x", "secrets": {"HF_TOKEN": None}}, tmp_path, environ={})


def test_file_mounts_local_copied_cloud_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    spec = _parse({"run": "x", "file_mounts": {"/remote/data": "data"}}, tmp_path)
    assert spec.file_mounts == {"/remote/data": str(tmp_path / "data")}
    with pytest.raises(SpecError, match=r"^file_mounts: /d: s3://b/x is a cloud URL \(s3://\)"):
        _parse({"run": "x", "file_mounts": {"/d": "s3://b/x"}}, tmp_path)


def test_cloud_keys_are_named_once_as_not_applicable(tmp_path: Path) -> None:
    spec = _parse(
        {
            "run": "python3 server.py --port $PORT",
            "resources": {
                "cloud": "gcp",
                "use_spot": True,
                "region": "r",
                "zone": "z",
                "ports": 8080,
            },
            "service": {
                "replica_policy": {
                    "min_replicas": 1,
                    "base_ondemand_fallback_replicas": 1,
                    "dynamic_ondemand_fallback": True,
                }
            },
        },
        tmp_path,
    )
    notes = not_applicable_notes(spec)
    named = [line.split(":")[0] for line in notes]
    assert named == [
        "resources.cloud",
        "resources.region",
        "resources.zone",
        "resources.use_spot",
        "service.replica_policy.base_ondemand_fallback_replicas",
        "service.replica_policy.dynamic_ondemand_fallback",
        "resources.ports",
    ]
    assert all("\n" not in line for line in notes)


def test_fixed_port_is_a_clear_early_error_beyond_one_replica(tmp_path: Path) -> None:
    """Where replicas cannot get a network of their own (tests/unit/test_isolation.py
    has the case where they can)."""
    base = {"run": "python3 server.py --port 8080", "resources": {"ports": 8080}}
    one = _parse({**base, "service": {"replicas": 1}}, tmp_path)
    assert fixed_port(one) == 8080 and fixed_port_problem(one, no_isolation="not root") is None
    two = _parse({**base, "service": {"replicas": 2}}, tmp_path)
    problem = fixed_port_problem(two, no_isolation="not root")
    assert problem is not None and problem.startswith("resources.ports: run does not use $PORT")
    assert "--port $PORT" in problem
    uses_port = _parse(
        {**base, "run": "python3 server.py --port $PORT", "service": {"replicas": 2}}, tmp_path
    )
    assert fixed_port(uses_port) is None and fixed_port_problem(uses_port) is None
    service_ports = _parse({"run": "serve", "service": {"ports": 9000, "replicas": 3}}, tmp_path)
    assert fixed_port(service_ports) == 9000
    problem = fixed_port_problem(service_ports, no_isolation="not root") or ""
    assert problem.startswith("service.ports:")


NO_GPU = Machine(cpus=2, memory_gb=8)


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        (
            {"accelerators": "A100:1"},
            "resources.accelerators: asks for A100:1, this machine has no GPU",
        ),
        ({"cpus": "64+"}, "resources.cpus: asks for 64+, this machine has 2 CPUs"),
        ({"memory": "512+"}, "resources.memory: asks for 512+, this machine has 8.0 GB"),
    ],
)
def test_resources_this_machine_cannot_give(
    tmp_path: Path, resources: dict[str, Any], expected: str
) -> None:
    problems = resource_problems(_parse({"run": "x", "resources": resources}, tmp_path), NO_GPU)
    assert len(problems) == 1 and problems[0].startswith(expected)


def test_resources_this_machine_can_give(tmp_path: Path) -> None:
    gpu = Machine(cpus=8, memory_gb=64, gpus=("NVIDIA A100-SXM4-40GB",))
    fits = {"cpus": "2+", "memory": "8+", "accelerators": ["H100:1", "A100:1"]}
    assert resource_problems(_parse({"run": "x", "resources": fits}, tmp_path), gpu) == []
    assert (
        resource_problems(_parse({"run": "x", "resources": {"cpus": "2+"}}, tmp_path), NO_GPU) == []
    )
    two = {"accelerators": "A100:2"}
    assert resource_problems(_parse({"run": "x", "resources": two}, tmp_path), gpu) != []
    either = {"any_of": [{"accelerators": "L4:1"}, {"cpus": 2}]}
    assert resource_problems(_parse({"run": "x", "resources": either}, tmp_path), NO_GPU) == []
