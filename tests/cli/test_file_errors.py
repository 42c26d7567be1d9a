"""A file with several mistakes: every one reported at once, one line each, field
path first, exit 2 (the CLI checks files before it talks to any controller)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.steady import Steady


def test_every_mistake_of_a_service_file_at_once(steady: Steady, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: web\n"
        "service:\n"
        "  replicas: -3\n"
        "  readiness_probe:\n"
        "    path: /health\n"
        "    timeout_seconds: soon\n"
        "  update_mod: rolling\n"
        "comand: python3 server.py\n"
    )
    proc = steady.run("up", str(bad), check=False)
    assert proc.returncode == 2, proc
    lines = proc.stderr.splitlines()
    assert all(line.startswith(f"error: {bad}: ") for line in lines), lines
    paths = [line.removeprefix(f"error: {bad}: ").split(":")[0] for line in lines]
    assert "comand" in paths and "service.update_mod" in paths, lines
    assert "service.replicas" in paths and "service.readiness_probe.timeout_seconds" in paths
    assert len(lines) == len(set(lines))
    # The typo explains the missing `run`: no separate "run: required" line.
    assert not any(p == "run" for p in paths), lines
    assert not (steady.home / "state.db").exists()


def test_every_mistake_of_a_fleet_file_at_once(steady: Steady, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "services:\n"
        "  - name: a\n"
        "    run: python3 server.py\n"
        "    service: {replicas: many}\n"
        "  - run: python3 server.py\n"
        "  - name: c\n"
        "    run: python3 server.py\n"
        "    envz: {A: 1}\n"
    )
    proc = steady.run("deploy", str(fleet), check=False)
    assert proc.returncode == 2, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"error: {fleet}: services[0].service.replicas: ")
    assert lines[1].startswith(f"error: {fleet}: services[1].name: required")
    assert lines[2].startswith(f"error: {fleet}: services[2].envz: unknown field")


def test_all_mistakes_survive_nesting_and_pickling() -> None:
    """The controller and the CLI pass SpecErrors across processes and prefixes."""
    import pickle

    from steadyserve.spec import SpecError

    error = SpecError("run", "required", more=[("service.replicas", "must be an integer")])
    nested = pickle.loads(pickle.dumps(error.under("services[2]").in_file("fleet.yaml")))
    assert str(nested) == "fleet.yaml: services[2].run: required"
    assert nested.lines() == [
        "fleet.yaml: services[2].run: required",
        "fleet.yaml: services[2].service.replicas: must be an integer",
    ]
