"""A Ray Serve config under ``steady deploy``: two applications under two route
prefixes on one gateway port, deploy twice changes nothing, ``status --format
ray``, and a rolling update of one application under load through the gateway
with zero failed requests."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

from tests.helpers.figures import report
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, api_headers, http_get
from tests.lb._lb_helpers import free_port
from tests.observe._observe import controller_url, get, requests_by_version, scrape

APPS = Path(__file__).parent / "apps"

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
  import_path: echo:Echo
  runtime_env:
    working_dir: {apps}
    env_vars: {{GREETING: "{greeting}"}}
  deployments:
  - name: Echo
    num_replicas: 2
    user_config:
      message: french
    health_check_period_s: 0.2
    graceful_shutdown_timeout_s: 5
    graceful_shutdown_wait_loop_s: 0.1
- name: summarize
  route_prefix: /summarize
  import_path: echo:Echo
  runtime_env:
    working_dir: {apps}
  deployments:
  - name: Echo
    num_replicas: 1
    user_config:
      message: summary
    health_check_period_s: 0.2
"""


def write_config(tmp: Path, port: int, greeting: str = "hi") -> Path:
    path = tmp / "serve_config.yaml"
    path.write_text(CONFIG.format(port=port, greeting=greeting, apps=APPS))
    return path


def test_two_applications_on_one_gateway_port(steady: Steady, tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    out = steady.run("deploy", str(config), "--wait", "--timeout", "90")
    assert "proxy_location: does not apply here" in out.stderr
    assert "logging_config" in out.stderr
    status, body = http_get(port, "/translate/v1?x=1")
    assert status == 200, body
    answer = json.loads(body)
    assert answer["message"] == "french"
    assert answer["path"] == "/translate/v1"  # forwarded whole, as Ray Serve does
    status, body = http_get(port, "/summarize")
    assert status == 200 and json.loads(body)["message"] == "summary"
    status, body = http_get(port, "/translatex")  # not under /translate
    assert status == 404
    assert b"translate" not in body and b"127.0.0.1" not in body

    services = {s["name"]: s for s in steady.status()["services"]}
    assert set(services) == {"translate-echo", "summarize-echo"}
    assert services["translate-echo"]["application"] == "translate"

    # A service the config did not make is left alone by its deploys.
    steady.run("up", str(EXAMPLES / "http_server" / "service.yaml"))
    again = steady.run("deploy", str(config), "--json").stdout
    actions = {item["name"]: item["action"] for item in json.loads(again)["services"]}
    assert actions == {"translate-echo": "none", "summarize-echo": "none", "http-server": "keep"}
    assert steady.service("http-server")["version"] == 1
    for name in ("translate-echo", "summarize-echo"):
        assert steady.service(name)["version"] == 1

    steady.run("down", "http-server")

    # A lightweight update, as Ray Serve's docs describe it: user_config in place.
    pids = {r["pid"] for r in steady.service("translate-echo")["replicas"]}
    config.write_text(config.read_text().replace("message: french", "message: german"))
    out = steady.run("deploy", str(config), "--wait", "--timeout", "60").stdout
    assert "in place" in out
    assert json.loads(http_get(port, "/translate")[1])["message"] == "german"
    assert {r["pid"] for r in steady.service("translate-echo")["replicas"]} == pids
    ray = json.loads(steady.run("status", "--format", "ray", "--json").stdout)
    app = ray["applications"]["translate"]
    assert app["status"] == "RUNNING" and app["route_prefix"] == "/translate"
    dep = app["deployments"]["Echo"]
    assert dep["status"] == "HEALTHY" and dep["replica_states"] == {"RUNNING": 2}
    text = steady.run("status", "--format", "ray").stdout
    assert "applications:" in text and "replica_states:" in text


def test_rolling_update_through_the_gateway_fails_nothing(steady: Steady, tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    steady.run("deploy", str(config), "--wait", "--timeout", "90")
    before = {r["pid"] for r in steady.service("translate-echo")["replicas"]}
    # POSTs: the load balancer never replays them, so a replica stopped while
    # the gateway still routes to it would show up as a failure.
    body = b'{"text": "hello"}'
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
    assert json.loads(clients[0].bodies[-1][1])["greeting"] == "hello"
    # The update succeeds once version 2 serves alone; the old replicas finish
    # stopping after that, within their drain (graceful_shutdown_timeout_s: 5).
    after = steady.wait_for(
        "translate-echo",
        lambda s: not before & {r["pid"] for r in s["replicas"]},
        timeout=15,
        what="the old replicas gone",
    )
    assert after["version"] == 2
    assert steady.service("summarize-echo")["version"] == 1

    # Observable like the endpoint's traffic: /metrics counts every request that
    # came through the gateway, by the version that answered (v1 greets "hi").
    sent = Counter(
        "1" if json.loads(b)["greeting"] == "hi" else "2" for c in clients for _, b in c.bodies
    )
    assert set(sent) == {"1", "2"}, sent
    url = controller_url(steady)
    counted = wait_for_counts(url, "translate-echo", "gateway", sum(sent.values()))
    assert counted == {"1": sent["1"], "2": sent["2"]}, (counted, sent)
    assert requests_by_version(scrape(url), "translate-echo", "endpoint") == {}
    # ... and the dashboard's per-version rates have them too (sampled once a
    # second, so the newest counts may need one more sample).
    deadline = time.monotonic() + 10
    while True:
        status, data = get(url, "/api/v1/dashboard/timeseries", api_headers(steady.home))
        series = json.loads(data)["services"]["translate-echo"]["versions"]
        if {"1", "2"} <= set(series) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200 and {"1", "2"} <= set(series)
    assert max(r for r in series["2"]["rps"] if r is not None) > 0


def wait_for_counts(url: str, service: str, entry: str, total: int) -> dict[str, float]:
    """The scrape's per-version counts once they add up to ``total`` (reports are
    posted twice a second), or what they were after 10 s."""
    deadline = time.monotonic() + 10
    counted: dict[str, float] = {}
    while time.monotonic() < deadline:
        counted = requests_by_version(scrape(url), service, entry)
        if sum(counted.values()) >= total:
            break
        time.sleep(0.2)
    return counted


FLEET = """\
gateway: {{port: {port}}}
services:
- name: web
  workdir: {workdir}
  run: python3 server.py
  service:
    route_prefix: /web
    access_log: true
    replicas: 1
    readiness_probe: {{path: /health, initial_delay_seconds: 20}}
    health_check_period_s: 0.2
    graceful_shutdown_wait_loop_s: 0.05
    graceful_shutdown_timeout_s: 2
"""


def test_gateway_traffic_is_counted_and_logged_apart_from_the_endpoints(
    steady: Steady, tmp_path: Path
) -> None:
    """One service, reached both ways: /metrics tells the entries apart by the
    ``entry`` label, and service.access_log has a line for each request, with its
    entry."""
    port = free_port()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.format(port=port, workdir=EXAMPLES / "http_server"))
    steady.run("deploy", str(fleet), "--wait", "--timeout", "60")
    endpoint = int(steady.service("web")["endpoint"].rsplit(":", 1)[1])
    for i in range(3):
        assert http_get(port, f"/web/g?n={i}")[0] == 200
    for i in range(2):
        assert http_get(endpoint, f"/e?n={i}")[0] == 200
    assert http_get(port, "/nothing")[0] == 404  # no service: not counted for one

    url = controller_url(steady)
    assert wait_for_counts(url, "web", "gateway", 3) == {"1": 3}
    assert wait_for_counts(url, "web", "endpoint", 2) == {"1": 2}
    families = scrape(url)
    hist = {
        s.labels["entry"]: s.value
        for s in families["steady_lb_request_duration_seconds"].samples
        if s.name.endswith("_count") and s.labels["service"] == "web"
    }
    assert hist == {"gateway": 3, "endpoint": 2}
    sent = {
        s.labels["entry"]: s.value
        for s in families["steady_lb_sent_bytes"].samples
        if s.labels["service"] == "web"
    }
    assert sent["gateway"] > 0 and sent["endpoint"] > 0

    log = steady.home / "services" / "web" / "access.log"
    deadline = time.monotonic() + 10  # both processes flush their lines once a second
    lines: list[dict[str, object]] = []
    while time.monotonic() < deadline and len(lines) < 5:
        time.sleep(0.2)
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    by_entry = sorted((str(x["entry"]), str(x["path"])) for x in lines)
    assert by_entry == [
        ("endpoint", "/e?n=0"),
        ("endpoint", "/e?n=1"),
        ("gateway", "/web/g?n=0"),
        ("gateway", "/web/g?n=1"),
        ("gateway", "/web/g?n=2"),
    ]
    assert {x["version"] for x in lines} == {1}


def test_a_starting_gateway_answers_only_once_it_has_its_routes(
    steady: Steady, tmp_path: Path
) -> None:
    """A request that reaches the gateway port while the gateway process starts
    waits for the route map. Before, the process served the connections queued on
    its port before its first map arrived, with no lanes: 404 for a route that
    exists (Ray's test_status_constructor_error saw it after serve.shutdown had
    stopped the gateway and the next serve.run started another)."""
    port = free_port()
    statuses: list[int] = []

    def probe() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                status, _ = http_get(port, "/summarize", timeout=30)
            except OSError:  # nothing listens yet
                time.sleep(0.005)
                continue
            statuses.append(status)
            if status == 200:
                return

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    steady.run("deploy", str(write_config(tmp_path, port)), "--wait", "--timeout", "90")
    prober.join(30)
    assert statuses and statuses[-1] == 200, statuses
    assert 404 not in statuses, statuses


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


def test_the_gateway_outlives_a_killed_controller(steady: Steady, tmp_path: Path) -> None:
    """Like a service's load balancer, the gateway keeps serving while the controller
    is gone, and the restarted controller adopts it instead of starting another."""
    port = free_port()
    steady.run("deploy", str(write_config(tmp_path, port)), "--wait", "--timeout", "90")
    gateway = json.loads((steady.home / "gateway.json").read_text())
    client = LoadClient(port, path="/translate", max_seconds=60).start()
    time.sleep(0.3)
    info = json.loads(steady.run("controller", "status", "--json").stdout)
    os.kill(info["pid"], signal.SIGKILL)
    time.sleep(1.0)  # served by the gateway alone
    steady.run("status")  # restarts the controller
    steady.wait_for("translate-echo", lambda s: s["status"] == "READY", timeout=30)
    time.sleep(0.5)
    client.stop()
    report(f"gateway across a controller kill: {client.summary()}")
    assert client.failed == 0 and client.sent > 20
    assert json.loads((steady.home / "gateway.json").read_text())["pid"] == gateway["pid"]
    # Its counters outlived the controller too: the new one shows every request.
    counted = wait_for_counts(controller_url(steady), "translate-echo", "gateway", client.sent)
    assert sum(counted.values()) == client.sent, (counted, client.sent)
    # The gateway follows the new controller: a new route shows up on it.
    config = write_config(tmp_path, port)
    config.write_text(config.read_text().replace("route_prefix: /summarize", "route_prefix: /s"))
    steady.run("deploy", str(config), "--wait", "--timeout", "60")
    deadline = time.monotonic() + 10
    while http_get(port, "/s")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert http_get(port, "/s")[0] == 200
    assert http_get(port, "/summarize")[0] == 404
