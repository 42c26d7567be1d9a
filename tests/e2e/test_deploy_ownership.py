"""``steady deploy`` takes down only what its own file made, and asks first;
a service that is down keeps its history and events until ``--purge``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.helpers.steady import EXAMPLES, Steady

SERVER = EXAMPLES / "http_server"


def service_text(name: str) -> str:
    return textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe: /health
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 2
        workdir: {SERVER}
        run: python3 server.py
        """)


def fleet_text(*names: str) -> str:
    items = [service_text(n) for n in names]
    return "services:\n" + "".join("  - " + textwrap.indent(i, "    ").lstrip() for i in items)


def names(steady: Steady) -> set[str]:
    return {s["name"] for s in steady.status()["services"]}


def test_deploy_keeps_services_it_did_not_make(steady: Steady, tmp_path: Path) -> None:
    solo = tmp_path / "solo.yaml"
    solo.write_text(service_text("solo"))
    steady.run("up", str(solo))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_text("alpha"))
    out = steady.run("deploy", str(fleet)).stdout
    # Before ownership, this took "solo" down without asking.
    assert "solo: kept, not in the file (made with steady up" in out
    assert names(steady) == {"solo", "alpha"}

    other = tmp_path / "other.yaml"
    other.write_text(fleet_text("beta"))
    plan = json.loads(steady.run("deploy", str(other), "--dry-run", "--json").stdout)
    actions = {item["name"]: item["action"] for item in plan["services"]}
    assert actions == {"beta": "create", "alpha": "keep", "solo": "keep"}

    # --prune-all takes down everything not listed, but only with a confirmation.
    refused = steady.run("deploy", str(other), "--prune-all", check=False)
    assert refused.returncode == 2
    assert "deploy takes down solo, alpha: pass -y to confirm" in refused.stderr
    assert names(steady) == {"solo", "alpha"}
    steady.run("deploy", str(other), "--prune-all", "-y")
    assert names(steady) == {"beta"}


def test_history_and_events_outlive_a_down(steady: Steady, tmp_path: Path) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(service_text("web"))
    steady.run("up", str(path), "--wait", "--timeout", "60")
    steady.run("down", "web")

    history = steady.run("history", "web")
    assert "web is down" in history.stdout
    assert "initial version" in history.stdout
    assert json.loads(steady.run("history", "web", "--json").stdout)["down"] is True

    events = steady.run("status", "web", "--events").stdout
    assert "web is down" in events
    assert "service taken down" in events
    data = json.loads(steady.run("status", "web", "--events", "--json").stdout)
    assert data["services"] == []
    assert any(e["reason"] == "service taken down" for e in data["down"][0]["events"])

    again = steady.run("down", "web", check=False)
    assert again.returncode == 2 and "already down" in again.stderr

    steady.run("down", "web", "--purge")
    gone = steady.run("history", "web", check=False)
    assert gone.returncode == 2 and "unknown service: web" in gone.stderr
    assert not (steady.home / "services" / "web").exists()
