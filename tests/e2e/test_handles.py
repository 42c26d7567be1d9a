"""Handles end to end: the text_ml graph as two services, the Summarizer calling the
Translator through a handle, across an in-place reconfigure and a rolling restart
of the callee, with no failed request."""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.figures import report
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, api_secret, http_get
from tests.lb._lb_helpers import free_port

APPS = Path(__file__).parent / "apps"
TEXT = "Hello my friend. The cat is in the house. Good morning my friend, my good friend."
QUERY = "/?text=" + TEXT.replace(" ", "+").replace(",", "%2C")


def graph_copy(tmp: Path) -> Path:
    """The example with short probe and drain periods (fast, and drains really happen)."""
    app = tmp / "text_ml"
    shutil.copytree(EXAMPLES / "text_ml", app)
    fleet = app / "fleet.yaml"
    text = fleet.read_text()
    text = text.replace("health_check_period_s: 1", "health_check_period_s: 0.2")
    text = text.replace("graceful_shutdown_timeout_s: 5", "graceful_shutdown_timeout_s: 3")
    fleet.write_text(text)
    return fleet


def port_of(svc: dict[str, object]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def test_handle_calls_follow_reconfigure_and_a_rolling_restart(
    steady: Steady, tmp_path: Path
) -> None:
    fleet = graph_copy(tmp_path)
    steady.run("deploy", str(fleet), "--wait", "--timeout", "90")
    port = port_of(steady.service("summarizer"))
    status, body = http_get(port, QUERY)
    assert status == 200, body
    assert body.decode() == "Bon matin mon ami, mon bon ami."

    # In place: the translator's language changes, the summarizer's answers follow.
    pids = sorted(r["pid"] for r in steady.service("translator")["replicas"])
    client = LoadClient(port, path=QUERY, max_seconds=90).start()
    time.sleep(0.5)
    fleet.write_text(fleet.read_text().replace("language: french", "language: german"))
    out = steady.run("deploy", str(fleet), "--wait", "--timeout", "60").stdout
    assert "in place" in out
    marker = time.time()
    time.sleep(0.5)
    # Rolling restart of the callee (a new env: new processes) under the same load.
    text = fleet.read_text().replace(
        "    import_path: text_ml:app.Translator\n",
        "    import_path: text_ml:app.Translator\n    envs:\n      REVISION: '2'\n",
    )
    fleet.write_text(text)
    steady.run("deploy", str(fleet), "--wait", "--timeout", "90")
    time.sleep(0.5)
    client.stop()
    report(f"handle calls across reconfigure + rolling restart of the callee: {client.summary()}")
    assert client.failed == 0, client.summary()
    assert client.sent > 50
    later = {b.decode() for t, b in client.bodies if t > marker}
    assert later == {"Gut morgen mein freund, mein gut freund."}
    translator = steady.wait_for(
        "translator",
        lambda svc: (
            len(svc["replicas"]) == 2 and all(r["pid"] not in pids for r in svc["replicas"])
        ),
        what="the old translator replicas to be gone",
    )
    assert translator["version"] == 3
    new_pids = sorted(r["pid"] for r in translator["replicas"])
    assert not set(new_pids) & set(pids)  # the restart really replaced the callee
    assert steady.service("summarizer")["version"] == 1


def test_the_call_path_is_refused_by_the_load_balancer(steady: Steady, tmp_path: Path) -> None:
    fleet = graph_copy(tmp_path)
    steady.run("deploy", str(fleet), "--wait", "--timeout", "90")
    svc = steady.service("translator")
    status, _ = http_get(port_of(svc), "/-/steady/call")
    assert status == 404
    # The replica itself takes calls (what the handles use), only with the home's
    # graph secret: any local user can reach its port.
    replica_port = svc["replicas"][0]["port"]
    status, body = http_get(replica_port, "/-/steady/call")
    assert status == 403 and b"graph secret" in body
    assert json.loads(http_get(port_of(svc), "/?text=hello")[1])["translation"] == "bonjour"
    # Handles use the routes-only token: a replica never holds the API's secret.
    secret = api_secret(steady.home)
    for replica in svc["replicas"]:
        env = psutil.Process(replica["pid"]).environ()
        assert env.get("STEADY_ROUTES_TOKEN") not in (None, secret)
        assert secret not in env.values()


def test_handles_read_routes_from_a_controller_that_requires_a_token(
    monkeypatch: pytest.MonkeyPatch, steady: Steady, tmp_path: Path
) -> None:
    """Replicas never get STEADY_TOKEN; their routes-only token is enough for handles.
    (monkeypatch first: its undo runs after ``steady``'s teardown, which needs the token.)"""
    monkeypatch.setenv("STEADY_TOKEN", "controller-only-token")
    fleet = graph_copy(tmp_path)
    text = fleet.read_text().replace(
        "    import_path: text_ml:app\n",
        "    import_path: text_ml:app\n    envs:\n      STEADY_HANDLE_WAIT_S: 5\n",
    )
    fleet.write_text(text)
    steady.run("deploy", str(fleet), "--wait", "--timeout", "90")
    status, body = http_get(port_of(steady.service("summarizer")), QUERY, timeout=20)
    assert (status, body.decode()) == (200, "Bon matin mon ami, mon bon ami.")


RAY_CONFIG_SUPPORT = importlib.util.find_spec("steadyserve.compat.ray_serve") is not None


@pytest.mark.skipif(
    not RAY_CONFIG_SUPPORT,
    reason="needs `steady deploy serve_config.yaml` (steadyserve.compat.ray_serve); "
    "this test is for the merged tree",
)
def test_the_ray_docs_serve_config_deploys_and_updates_in_place(
    steady: Steady, tmp_path: Path
) -> None:
    """The Ray docs' flow: serve_config.yaml with `steady deploy`, then a new
    `language` deployed again: same pids, answers follow, no failed request."""
    app = tmp_path / "text_ml"
    shutil.copytree(EXAMPLES / "text_ml", app)
    config = app / "serve_config.yaml"
    port = free_port()
    text = config.read_text().replace("port: 8000", f"port: {port}")
    for name in ("Translator", "Summarizer"):
        text = text.replace(
            f"      - name: {name}\n",
            f"      - name: {name}\n        health_check_period_s: 0.2\n"
            "        graceful_shutdown_timeout_s: 3\n",
        )
    config.write_text(text)
    steady.run("deploy", str(config), "--wait", "--timeout", "90")
    status, body = http_get(port, QUERY, timeout=20)
    assert (status, body.decode()) == (200, "Bon matin mon ami, mon bon ami.")

    def translator() -> dict[str, Any]:
        services = steady.status()["services"]
        (found,) = [s for s in services if "translator" in str(s["name"]).lower()]
        return found

    pids = sorted(r["pid"] for r in translator()["replicas"])
    client = LoadClient(port, path=QUERY, max_seconds=60).start()
    time.sleep(0.5)
    config.write_text(config.read_text().replace("language: french", "language: german"))
    steady.run("deploy", str(config), "--wait", "--timeout", "60")
    marker = time.time()
    time.sleep(0.5)
    client.stop()
    report(f"serve_config.yaml language change in place: {client.summary()}")
    assert client.failed == 0 and client.sent > 20, client.summary()
    later = {b.decode() for t, b in client.bodies if t > marker}
    assert later == {"Gut morgen mein freund, mein gut freund."}
    assert sorted(r["pid"] for r in translator()["replicas"]) == pids


def test_a_handle_call_wakes_a_callee_scaled_to_zero(steady: Steady, tmp_path: Path) -> None:
    """Handles bypass the load balancer, so they ask the controller for a replica."""
    fleet = tmp_path / "zero.yaml"
    common = (
        f"    workdir: {APPS}\n"
        "    service:\n"
        "      health_check_period_s: 0.2\n"
        "      graceful_shutdown_timeout_s: 2\n"
    )
    fleet.write_text(
        "services:\n"
        "  - name: callee\n"
        "    import_path: graph_apps:app.Callee\n" + common + "      cold_start_timeout_s: 60\n"
        "      replica_policy:\n"
        "        min_replicas: 0\n"
        "        max_replicas: 1\n"
        "        target_ongoing_requests: 10\n"
        "  - name: caller\n"
        "    import_path: graph_apps:app\n"
        "    envs:\n"
        "      STEADY_HANDLE_WAIT_S: 30\n" + common + "      replicas: 1\n"
    )
    steady.run("deploy", str(fleet), "--wait", "--timeout", "90")
    assert steady.service("callee")["total_replicas"] == 0
    status, body = http_get(port_of(steady.service("caller")), "/", timeout=45)
    assert (status, body) == (200, b"pong")
    assert steady.service("callee")["total_replicas"] == 1
