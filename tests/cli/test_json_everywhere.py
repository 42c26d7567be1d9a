"""Every ``steady`` command under ``--json``, errors included, prints JSON on stdout.

The commands are found by walking click's command tree, so a command added later
is covered without a line here. Each is run twice against one real controller
(no service): with arguments naming nothing that exists (its own error, or its
answer), and with an option no command has (click's usage error). In-process
(click's runner), so the whole tree costs about a second.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from steadyserve.cli.docs import all_commands
from steadyserve.cli.main import main
from tests.helpers.steady import Steady, processes_of_home

ERROR_KEYS = {"error", "kind", "message", "field", "file", "exit_code", "errors"}
NOT_IN_PROCESS = {"controller run"}
"""A foreground daemon: run as a process below, not inside the test's."""


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        root = Path(tmp) / "home"
        cli = Steady(root)
        cli.run("controller", "start")
        try:
            yield root
        finally:
            cli.run("controller", "stop", check=False, timeout=60)
            assert not processes_of_home(root)


def _nothing_args(command: click.Command) -> list[str]:
    """Arguments that name nothing that exists: a service, a file, a job id."""
    args: list[str] = []
    for param in command.params:
        if isinstance(param, click.Argument) and (param.required or param.nargs == -1):
            if isinstance(param.type, click.types.IntParamType):
                args.append("999999")
            elif isinstance(param.type, click.Path):
                args.append("/nonexistent/service.yaml")
            else:
                args.append("nosvc")
        elif isinstance(param, click.Option) and param.required:
            args += [param.opts[0], "nosvc"]
    return args


def _run(path: str, args: list[str], home: Path) -> tuple[int, list[Any]]:
    result = CliRunner().invoke(
        main, [*path.split(), *args, "--json"], env={"STEADY_HOME": str(home)}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        path,
        result.exception,
    )
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    try:
        objects = [json.loads(result.stdout)] if lines else []
    except ValueError:  # JSON lines
        objects = [json.loads(line) for line in lines]
    return result.exit_code, objects


def _check_error(path: str, code: int, objects: list[Any]) -> None:
    assert objects, f"steady {path} --json printed nothing (exit {code})"
    last = objects[-1]
    assert isinstance(last, dict), (path, last)
    if code != 0:
        assert set(last) >= ERROR_KEYS, (path, last)
        assert last["exit_code"] == code and last["error"] is True, (path, last)


def test_every_command_answers_in_json_even_when_it_fails(home: Path) -> None:
    commands = [
        (path, command)
        for path, command, _ in all_commands()
        if path and not isinstance(command, click.Group) and path not in NOT_IN_PROCESS
    ]
    assert len(commands) >= 30
    failed_somewhere = 0
    for path, command in sorted(commands, key=lambda item: item[0] == "controller stop"):
        code, objects = _run(path, _nothing_args(command), home)
        _check_error(path, code, objects)
        failed_somewhere += code != 0
        code, objects = _run(path, ["--no-such-option"], home)
        assert code == 2, (path, objects)
        _check_error(path, code, objects)
        assert objects[-1]["kind"] == "usage" and "no-such-option" in objects[-1]["message"]
    assert failed_somewhere > 20  # the walk reached the commands' own errors


def test_status_of_an_unknown_service_is_an_error_object(home: Path) -> None:
    code, objects = _run("status", ["nosvc"], home)
    assert code == 2
    assert objects == [
        {
            "error": True,
            "kind": "bad_input",
            "message": "unknown service: nosvc",
            "field": None,
            "file": None,
            "exit_code": 2,
            "errors": [{"field": None, "message": "unknown service: nosvc"}],
        }
    ]


def test_a_file_error_names_its_field(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("service:\n  replicas: -1\n  readiness_probe: /\nrun: x\n")
    code, objects = _run("up", [str(bad)], home)
    assert code == 2
    (error,) = objects
    assert error["field"] == "service.replicas" and error["file"] == str(bad)
    assert error["kind"] == "bad_input" and error["errors"][0]["field"] == "service.replicas"


def test_controller_run_says_its_exit_in_json(home: Path) -> None:
    """The home's controller runs already: a second one exits 1, and says so in JSON."""
    out = Steady(home).run("controller", "run", "--json", check=False, timeout=60)
    assert out.returncode == 1
    assert json.loads(out.stdout) == {"exit_code": 1}
