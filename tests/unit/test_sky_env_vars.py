"""SkyPilot's task variables: ``--env``/``--secret`` set a file's ``envs`` and
``secrets``, and ``$KEY``/``${KEY}`` in ``service`` and ``file_mounts`` are filled
with them (SkyPilot's ``_fill_in_env_vars``; its test_skyserve_https names its TLS
files so)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from steadyserve.spec import SpecError, load_service_file
from steadyserve.spec.variables import cli_values, fill_in


def test_dollar_names_are_filled_and_unknown_ones_kept() -> None:
    values = {"MODEL": "llama", "MODEL_SIZE": "8b"}
    node = {"a": "$MODEL-${MODEL_SIZE}", "b": ["$MODELS", "$HOME", 3], "$MODEL": "x"}
    assert fill_in(node, values) == {"a": "llama-8b", "b": ["$MODELS", "$HOME", 3], "llama": "x"}


def test_cli_values_take_a_bare_key_from_the_environment() -> None:
    assert cli_values(["A=1", "B=x=y", "C"], "--env", {"C": "from-here"}) == {
        "A": "1",
        "B": "x=y",
        "C": "from-here",
    }
    with pytest.raises(SpecError) as refused:
        cli_values(["D"], "--env", {})
    assert str(refused.value) == "--env: D: not set here; pass --env D=VALUE"
    with pytest.raises(SpecError, match="expected KEY=VALUE or KEY"):
        cli_values(["=1"], "--secret", {})


def _file(tmp: Path) -> Path:
    path = tmp / "task.yaml"
    path.write_text(
        textwrap.dedent("""\
            envs:
              MODEL_NAME:
            secrets:
              PROBE_TOKEN: t0
            service:
              readiness_probe:
                path: /v1/${MODEL_NAME}
                post_data: {model: $MODEL_NAME}
                headers: {Authorization: Bearer $PROBE_TOKEN}
            run: python3 server.py --port $PORT --model $MODEL_NAME
            """)
    )
    return path


def test_env_and_secret_options_set_the_file_and_fill_the_service(tmp_path: Path) -> None:
    spec = load_service_file(
        _file(tmp_path), envs={"MODEL_NAME": "m1"}, secrets={"PROBE_TOKEN": "s"}
    )
    probe = spec.service.readiness_probe
    assert (probe.path, probe.post_data, probe.headers) == (
        "/v1/m1",
        {"model": "m1"},
        {"Authorization": "Bearer s"},
    )
    assert spec.envs == {"MODEL_NAME": "m1"} and spec.secrets == {"PROBE_TOKEN": "s"}
    assert spec.run == "python3 server.py --port $PORT --model $MODEL_NAME"  # bash fills run


def test_a_null_env_given_as_a_secret_is_a_secret(tmp_path: Path) -> None:
    """SkyPilot's test_skyserve_https leaves TLS_CERTFILE_ENV_VAR null in envs and
    gives it with --secret: it is then a secret (never shown), not an env."""
    spec = load_service_file(_file(tmp_path), secrets={"MODEL_NAME": "m3"})
    assert spec.envs == {} and spec.secrets == {"PROBE_TOKEN": "t0", "MODEL_NAME": "m3"}
    assert spec.service.readiness_probe.path == "/v1/m3"


def test_a_null_env_not_given_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as refused:
        load_service_file(_file(tmp_path))
    assert refused.value.lines() == [
        f"{tmp_path / 'task.yaml'}: envs.MODEL_NAME: no value:"
        " pass --env MODEL_NAME=VALUE (or --secret), or set it"
    ]


def test_steady_up_takes_env_and_secret_flags(tmp_path: Path) -> None:
    """``--dry-run`` starts nothing; the file loads once MODEL_NAME is given."""
    cli = [sys.executable, "-m", "steadyserve.cli"]
    env = {"STEADY_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    ran = subprocess.run(
        [*cli, "serve", "up", "--help"], capture_output=True, text=True, env=env, check=True
    )
    assert "--env KEY=VALUE" in ran.stdout and "--secret KEY=VALUE" in ran.stdout
    file = str(_file(tmp_path))
    dry = subprocess.run(
        [*cli, "up", file, "--dry-run", "--json", "--env", "MODEL_NAME=m2"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert dry.returncode == 0, dry.stderr
    bad = subprocess.run([*cli, "up", file, "--dry-run"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
    assert bad.stderr.strip().endswith(
        "envs.MODEL_NAME: no value: pass --env MODEL_NAME=VALUE (or --secret), or set it"
    )
