"""``runtime_env`` of a Ray Serve config: every key mapped onto the version (its
packages, variables, modules, excluded files), a change restarts as in Ray, and
the graph is described inside the version's own environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from steadyserve.compat.file_mounts import staged
from steadyserve.compat.ray_graph import Runtime, describe_graph
from steadyserve.compat.ray_serve import translate
from steadyserve.spec import SpecError
from steadyserve.spec.changes import classify
from tests.helpers.wheels import make_wheel, offline_env

SEEN: list[Runtime] = []


def one(import_path: str, workdir: Path, args: Any, runtime: Runtime) -> list[dict[str, Any]]:
    SEEN.append(runtime)
    return [{"name": "App", "class_path": import_path, "options": {}, "ingress": True}]


def config(runtime_env: dict[str, Any]) -> dict[str, Any]:
    return {"applications": [{"name": "a", "import_path": "m:app", "runtime_env": runtime_env}]}


def test_pip_and_uv_in_rays_shapes_become_the_versions_packages(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"pip": ["fastapi", "pinme==1.0"]}, ["fastapi", "pinme==1.0"]),
        ({"uv": ["pinme"]}, ["pinme"]),
        (
            {"pip": {"packages": ["pinme"], "pip_install_options": ["--no-deps"]}},
            ["pinme", "--no-deps"],
        ),
        ({"uv": {"packages": ["pinme"], "uv_check": False}}, ["pinme"]),
        ({"pip": "requirements.txt"}, "requirements.txt"),
        ({"pip": str(tmp_path / "requirements.txt")}, "requirements.txt"),
    ]
    (tmp_path / "requirements.txt").write_text("pinme\n")
    for env, expected in cases:
        SEEN.clear()
        out = translate(config(env), tmp_path, one)
        assert out.specs[0].pip == expected, env
        assert SEEN[0].pip == expected  # the import runs with them installed
    out = translate(config({"uv": {"packages": ["pinme"], "uv_check": False}}), tmp_path, one)
    assert any("uv.uv_check: does not apply here" in n for n in out.notices)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"pip": ["a"], "uv": ["b"]}, "applications[0].runtime_env.uv: pip and uv both"),
        ({"pip": {"packages": ["a"], "pip_chek": 1}}, "runtime_env.pip.pip_chek: unknown field"),
        ({"pip": "/etc/requirements.txt"}, "runtime_env.pip: a requirements file must be"),
        ({"py_modules": ["s3://bucket/m.zip"]}, "runtime_env.py_modules[0]: must be a local"),
        ({"py_modules": ["./nowhere"]}, "runtime_env.py_modules[0]: no such folder"),
        ({"excludes": "*.log"}, "runtime_env.excludes: must be a list of gitignore patterns"),
        ({"env_vars": ["A=1"]}, "runtime_env.env_vars: must be a mapping"),
    ],
)
def test_bad_runtime_env_keys_are_one_line_naming_the_key(
    tmp_path: Path, env: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        translate(config(env), tmp_path, one)
    assert message in str(caught.value)


def test_py_modules_are_copied_into_the_version_and_wheels_installed(tmp_path: Path) -> None:
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("X = 1\n")
    wheel = make_wheel(tmp_path / "wheels", "pinme", "1.0")
    SEEN.clear()
    out = translate(config({"pip": ["a"], "py_modules": ["./helpers", str(wheel)]}), tmp_path, one)
    spec = out.specs[0]
    assert spec.file_mounts == {"helpers": str(tmp_path / "helpers")}
    assert spec.pip == ["a", str(wheel)]
    assert SEEN[0].py_modules == {"helpers": str(tmp_path / "helpers")}


def test_excludes_are_left_out_of_the_versions_copy(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "big.bin").write_text("0" * 100)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("k")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "x").write_text("c")
    out = translate(config({"excludes": ["*.bin", "cache/"]}), tmp_path, one)
    with staged(out.specs[0]) as sent:
        assert sent.workdir is not None
        copied = sorted(
            p.relative_to(sent.workdir).as_posix() for p in Path(sent.workdir).rglob("*")
        )
    assert copied == ["app.py", "data", "data/keep.txt"]


def test_a_runtime_env_change_restarts_as_in_ray(tmp_path: Path) -> None:
    old = translate(config({"env_vars": {"A": "1"}}), tmp_path, one).specs[0]
    for env in ({"env_vars": {"A": "2"}}, {"excludes": ["*.log"]}, {"pip": ["pinme"]}):
        new = translate(config(env), tmp_path, one).specs[0]
        changes = classify(old, new, old_workdir_hash="h", new_workdir_hash="h")
        assert changes.needs_restart, env
        assert any(c.path.startswith("ray_options") for c in changes.changes)


GRAPH_MODULE = """
import pinme
from steadyserve import serve

@serve.deployment(user_config={"version": pinme.__version__})
class Model:
    def __call__(self, request):
        return pinme.__version__

app = Model.bind()
"""


def test_the_graph_is_described_inside_the_versions_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runtime_env.pip`` names a package the controller does not have: the
    describer imports the application where it is installed (it used to run in
    SteadyServe's own environment: No module named 'pinme')."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pinme", "1.5")
    for key, value in offline_env(wheels).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STEADY_HOME", str(tmp_path / "home"))
    app = tmp_path / "app"
    app.mkdir()
    (app / "pinned.py").write_text(GRAPH_MODULE)
    runtime = Runtime(pip=["pinme==1.5"], envs={"MODE": "x"})
    found = describe_graph("pinned:app", app, {}, runtime)
    assert found is not None and found[0]["options"]["user_config"] == {"version": "1.5"}
    assert any(
        n.startswith("runtime_env: built the version's environment") for n in runtime.notices
    )
    assert os.path.exists(tmp_path / "home" / "envs")
    assert sys.modules.get("pinme") is None
