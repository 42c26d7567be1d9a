"""The --json contracts of docs/cli.md, checked against a real controller, plus
what the human output promises: the endpoint's port notice and a failed update's
reason under `steady status`."""

from __future__ import annotations

import json
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steadyserve.client.contracts import CONTRACTS, DEPLOY_ITEM, PLAN, Shape
from tests.helpers.steady import EXAMPLES, Steady

FIRST_PORT = 30001


def spec(replicas: int = 1, run: str = "python3 server.py") -> str:
    return textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 10
          replicas: {replicas}
          update_deadline_s: 30
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
        workdir: {EXAMPLES / "http_server"}
        run: {run}
        """)


def assert_shape(value: Any, shape: Shape, where: str) -> None:
    assert isinstance(value, dict), (where, value)
    missing = set(shape.keys) - set(value)
    assert not missing, f"{where}: missing {sorted(missing)} in {sorted(value)}"
    for key, inner in shape.nested:
        item = value.get(key.removesuffix("[]"))
        for index, element in enumerate(item if isinstance(item, list) else [item]):
            if element is not None:
                assert_shape(element, inner, f"{where}.{key}[{index}]")


def run_json(steady: Steady, *args: str) -> Any:
    return json.loads(steady.run(*args, "--json", timeout=120).stdout)


@pytest.fixture
def first_port_taken() -> Iterator[None]:
    """Port 30001 held by something that is not SteadyServe (this test): the default
    endpoint must move, and say so. Another test's service (another pytest process)
    may hold it for a while and then let it go, freeing it for this test's `up`:
    wait until this test holds it itself (bounded)."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAITs
    deadline = time.monotonic() + 60
    while True:
        try:
            holder.bind(("127.0.0.1", FIRST_PORT))
            holder.listen()
            break
        except OSError:
            if time.monotonic() > deadline:  # held for good by something else: still taken
                break
            time.sleep(0.2)
    try:
        yield
    finally:
        holder.close()


def test_json_of_every_command_and_what_humans_see(
    steady: Steady, tmp_path: Path, first_port_taken: None
) -> None:
    v1 = tmp_path / "v1.yaml"
    v1.write_text(spec())
    up = steady.run("up", str(v1), "--wait", "--timeout", "60")
    port = int(steady.service("web")["endpoint"].rsplit(":", 1)[1])
    assert port != FIRST_PORT
    assert up.stdout.splitlines()[0] == f"Service web is starting at http://127.0.0.1:{port}"
    assert f"warning: {FIRST_PORT} is in use by another process: using {port}" in up.stderr

    status = run_json(steady, "status", "--events")
    assert_shape(status, CONTRACTS["status"].shape, "status")
    events = status["services"][0]["events"]
    assert events and all(set(e) >= {"time", "time_iso", "reason"} for e in events)

    history = run_json(steady, "history", "web")
    assert_shape(history, CONTRACTS["history"].shape, "history")
    assert history["versions"][0]["created_at_iso"].endswith("Z")

    v2 = tmp_path / "v2.yaml"
    v2.write_text(spec(replicas=2))
    dry = run_json(steady, "update", "web", str(v2), "--dry-run")
    assert_shape(dry, PLAN, "update --dry-run")
    assert dry["dry_run"] and dry["changes"][0]["path"] == "service.replicas"
    done = run_json(steady, "update", "web", str(v2), "--wait", "--timeout", "60")
    assert_shape(done, PLAN, "update --wait")
    assert done["update"]["status"] == "SUCCEEDED" and done["update"]["finished_at_iso"]

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "services:\n"
        + textwrap.indent(spec(replicas=3), "    ").replace("    name: web", "  - name: web", 1)
    )
    deploy = run_json(steady, "deploy", str(fleet), "--dry-run")
    assert_shape(deploy, CONTRACTS["deploy"].shape, "deploy")
    assert_shape(deploy["services"][0], PLAN, "deploy item")
    assert_shape(deploy["services"][0], DEPLOY_ITEM, "deploy item")

    lines = steady.run("logs", "web", "1", "--json").stdout.splitlines()
    assert lines
    for line in lines:
        assert_shape(json.loads(line), CONTRACTS["logs"].shape, "logs")

    controller = run_json(steady, "controller", "status")
    assert_shape(controller, CONTRACTS["controller status"].shape, "controller status")

    # A failed update: its reason stays under the service row until the next update.
    broken = tmp_path / "broken.yaml"
    broken.write_text(spec(replicas=2, run="python3 -c 'raise SystemExit(3)'"))
    failed = steady.run("update", "web", str(broken), "--wait", "--timeout", "60", check=False)
    assert failed.returncode == 1, failed
    human = steady.run("status", "web").stdout.splitlines()
    note = next(line for line in human if line.startswith("web: update to version"))
    reason = steady.service("web")["update"]["message"]
    assert note.endswith(reason) and (" FAILED: " in note or " ROLLED_BACK: " in note)

    down = run_json(steady, "down", "web")
    assert_shape(down, CONTRACTS["down"].shape, "down")
    assert down["down"] == ["web"]
