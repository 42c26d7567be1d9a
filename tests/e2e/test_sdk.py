"""``steadyserve.sdk`` against a real controller, load balancer and replicas: the
calls return the same typed objects as ``steady ... --json``, errors carry the
CLI's one line and exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from steadyserve import sdk
from steadyserve.client.contracts import CONTRACTS, EVENT, HISTORY_VERSION, PLAN, SERVICE
from tests.helpers.steady import EXAMPLES, Steady, http_get

SERVER = EXAMPLES / "http_server"


def _file(tmp: Path, message: str, name: str = "web.yaml") -> Path:
    path = tmp / name
    path.write_text(
        textwrap.dedent(f"""\
        service:
          readiness_probe: {{path: /health, initial_delay_seconds: 20, timeout_seconds: 2}}
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
        workdir: {SERVER}
        envs: {{MESSAGE: {message}}}
        run: python3 server.py
        """)
    )
    return path


def test_a_service_scripted_from_python(steady: Steady, tmp_path: Path) -> None:
    home = steady.home
    created = sdk.up(_file(tmp_path, "one"), "web", wait=True, home=home)
    assert set(CONTRACTS["up"].shape.keys) <= set(created) and created["name"] == "web"

    (svc,) = sdk.status("web", home=home)
    assert set(SERVICE.keys) <= set(svc) and svc["status"] == "READY"
    assert svc["replicas"][0]["launched_at_iso"].endswith("Z")
    # One source of truth: the very object `steady status --json` prints.
    (cli,) = json.loads(steady.run("status", "web", "--json").stdout)["services"]
    assert set(cli) == set(svc)
    port = int(svc["endpoint"].rsplit(":", 1)[1])
    assert http_get(port)[0] == 200
    _readme_curl(steady)

    plan = sdk.update("web", _file(tmp_path, "two"), mode="blue_green", wait=True, home=home)
    assert set(PLAN.keys) <= set(plan) and plan["mode"] == "blue_green"
    assert plan["update"]["status"] == "SUCCEEDED" and plan["version"] == 2
    assert b"two" in http_get(port)[1]

    # A workdir change is planned as the files it adds, removes and changes.
    moved = tmp_path / "wd"
    shutil.copytree(SERVER, moved)
    (moved / "extra.txt").write_text("new file\n")
    text = _file(tmp_path, "two").read_text().replace(str(SERVER), str(moved))
    (tmp_path / "moved.yaml").write_text(text)
    planned = sdk.update("web", tmp_path / "moved.yaml", dry_run=True, home=home)
    (workdir,) = [c for c in planned["changes"] if c["path"] == "workdir"]
    files = workdir["files"]  # type: ignore[typeddict-item]
    assert files["added"] == ["extra.txt"] and files["removed"] == files["changed"] == []

    back = sdk.rollback("web", to=1, dry_run=True, home=home)
    assert back["dry_run"] is True and back["changed"] is True
    versions = sdk.history("web", home=home)["versions"]
    assert [v["version"] for v in versions] == [1, 2]
    assert all(set(HISTORY_VERSION.keys) <= set(v) for v in versions)
    assert all(set(EVENT.keys) <= set(e) for e in sdk.events("web", home=home))
    assert sdk.wait_ready("web", 30, home=home)["ready_replicas"] == 1

    fleet = tmp_path / "fleet.yaml"
    item = textwrap.indent(_file(tmp_path, "x").read_text(), "    ")
    fleet.write_text("services:\n  - name: extra\n" + item)
    preview = sdk.deploy(fleet, dry_run=True, home=home)
    actions = {i["name"]: i["action"] for i in preview["services"]}
    assert actions == {"extra": "create", "web": "keep"}  # web was made by up, not the file

    assert sdk.down("web", home=home) == {"down": ["web"], "purged": False}
    assert sdk.status(home=home) == [] and sdk.history("web", home=home)["down"] is True


def test_errors_are_one_line_with_the_cli_exit_code(steady: Steady, tmp_path: Path) -> None:
    home = steady.home
    with pytest.raises(sdk.SteadyError) as unknown:
        sdk.history("nope", home=home)
    assert unknown.value.exit_code == 2 and "unknown service: nope" in unknown.value.message
    bad = tmp_path / "bad.yaml"
    bad.write_text("service:\n  replica: 2\nrun: python3 server.py\n")
    with pytest.raises(sdk.SteadyError) as spec:
        sdk.up(bad, "bad", home=home)
    assert spec.value.exit_code == 2 and "service.replica" in spec.value.message
    with pytest.raises(sdk.SteadyError) as mode:
        sdk.update("web", bad, mode="sideways", home=home)
    assert mode.value.exit_code == 2 and mode.value.message.startswith("mode:")
    assert sdk.status(home=home) == []  # nothing was started


def test_history_ends_a_name_s_earlier_life(steady: Steady, tmp_path: Path) -> None:
    """down, then up under the same name: version 1 is retired, not still active."""
    home = steady.home
    idle = tmp_path / "idle.yaml"
    idle.write_text(_file(tmp_path, "idle").read_text().replace("replicas: 1", "replicas: 0"))
    sdk.up(idle, "idle", home=home)
    sdk.down("idle", home=home)
    sdk.up(idle, "idle", home=home)
    outcomes = [(v["version"], v["outcome"]) for v in sdk.history("idle", home=home)["versions"]]
    assert outcomes == [(1, "retired"), (2, "active")]
    out = steady.run("history", "idle").stdout.splitlines()
    assert [line.split()[3] for line in out[1:]] == ["retired", "active"], out


def _readme_curl(steady: Steady) -> None:
    """README command 1 ends by requesting the endpoint steady reports, and fails
    when that request fails (curl -f): run its tail against this service."""
    readme = (EXAMPLES.parent / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("python3 -m venv"))
    tail = command[command.index("curl ") :]
    assert tail == 'curl -fsS "$(steady status http-server --endpoint)/"', tail
    env = dict(steady.env, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    ok = subprocess.run(
        ["bash", "-c", tail.replace("http-server", "web")], env=env, capture_output=True, timeout=60
    )
    assert ok.returncode == 0 and b'"message": "one"' in ok.stdout, ok
    # No such service: no endpoint, the request cannot be made, the command fails
    # (and -f makes an HTTP error status fail it too).
    bad = subprocess.run(
        ["bash", "-c", tail.replace("http-server", "nope")],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert bad.returncode != 0, bad
