"""A Ray Serve config under ``steady deploy``: two applications under two route
prefixes on one gateway port, deploy twice changes nothing, ``status --format
ray``, and a rolling update of one application under load through the gateway
with zero failed requests."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from steadyserve.backends.local import free_port
from tests.helpers.figures import report
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, http_get

CONFIG = """\
proxy_location: EveryNode
http_options:
  host: 0.0.0.0
  port: {port}
logging_config:
  log_level: INFO
applications:
- name: translate
  route_prefix: /translate
  import_path: text_ml:Translator
  runtime_env:
    working_dir: .
    env_vars: {{GREETING: "{greeting}"}}
  deployments:
  - name: Translator
    num_replicas: 2
    user_config:
      language: french
    health_check_period_s: 0.2
    graceful_shutdown_timeout_s: 5
    graceful_shutdown_wait_loop_s: 0.1
- name: summarize
  route_prefix: /summarize
  import_path: text_ml:Summarizer
  runtime_env:
    working_dir: .
  deployments:
  - name: Summarizer
    num_replicas: 1
    health_check_period_s: 0.2
"""


def write_config(tmp: Path, port: int, greeting: str = "hi") -> Path:
    app = tmp / "text_ml"
    if not app.exists():
        shutil.copytree(EXAMPLES / "text_ml", app)
    path = app / "serve_config.yaml"
    path.write_text(CONFIG.format(port=port, greeting=greeting))
    return path


def test_two_applications_on_one_gateway_port(steady: Steady, tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    out = steady.run("deploy", str(config), "--wait", "--timeout", "90")
    assert "proxy_location: does not apply here" in out.stderr
    assert "logging_config" in out.stderr
    status, body = http_get(port, "/translate?text=good+morning")
    assert status == 200, body
    assert json.loads(body)["translation"] == "bon matin"
    status, body = http_get(port, "/summarize?text=One.+Two.")
    assert status == 200 and "summary" in json.loads(body)
    status, body = http_get(port, "/translatex")  # not under /translate
    assert status == 404
    assert b"translate" not in body and b"127.0.0.1" not in body

    services = {s["name"]: s for s in steady.status()["services"]}
    assert set(services) == {"translate-translator", "summarize-summarizer"}
    assert services["translate-translator"]["application"] == "translate"

    # A service the config did not make is left alone by its deploys.
    steady.run("up", str(EXAMPLES / "http_server" / "service.yaml"))
    again = steady.run("deploy", str(config), "--json").stdout
    actions = {item["name"]: item["action"] for item in json.loads(again)["services"]}
    assert actions == {"translate-translator": "none", "summarize-summarizer": "none"}
    assert steady.service("http-server")["version"] == 1
    for name in ("translate-translator", "summarize-summarizer"):
        assert steady.service(name)["version"] == 1

    steady.run("down", "http-server")
    ray = json.loads(steady.run("status", "--format", "ray", "--json").stdout)
    app = ray["applications"]["translate"]
    assert app["status"] == "RUNNING" and app["route_prefix"] == "/translate"
    dep = app["deployments"]["Translator"]
    assert dep["status"] == "HEALTHY" and dep["replica_states"] == {"RUNNING": 2}
    text = steady.run("status", "--format", "ray").stdout
    assert "applications:" in text and "replica_states:" in text


def test_rolling_update_through_the_gateway_fails_nothing(steady: Steady, tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    steady.run("deploy", str(config), "--wait", "--timeout", "90")
    before = {r["pid"] for r in steady.service("translate-translator")["replicas"]}
    # POSTs: the load balancer never replays them, so a replica stopped while
    # the gateway still routes to it would show up as a failure.
    body = b'{"text": "hello my friend"}'
    clients = [
        LoadClient(port, path="/translate", method="POST", body=body, max_seconds=90).start()
        for _ in range(3)
    ]
    time.sleep(0.5)
    write_config(tmp_path, port, greeting="hello")  # runtime_env: a restart, as in Ray
    out = steady.run("deploy", str(config), "--wait", "--timeout", "90").stdout
    time.sleep(0.5)
    for client in clients:
        client.stop()
        report(f"rolling update through the gateway (POST): {client.summary()}")
    assert "restart" in out
    assert all(c.failed == 0 and c.sent > 20 for c in clients)
    after = steady.service("translate-translator")
    assert after["version"] == 2
    assert not before & {r["pid"] for r in after["replicas"]}
    assert steady.service("summarize-summarizer")["version"] == 1


def test_a_mistake_in_a_ray_config_changes_nothing(steady: Steady, tmp_path: Path) -> None:
    config = write_config(tmp_path, free_port())
    config.write_text(config.read_text().replace("num_replicas: 2", "num_replica: 2"))
    proc = steady.run("deploy", str(config), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        "applications[0].deployments[0].num_replica: unknown field (did you mean num_replicas?)"
    )
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not steady.home.exists()  # no controller was even started
