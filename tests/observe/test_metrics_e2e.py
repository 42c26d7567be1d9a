"""End to end: the counts in the controller's /metrics match, version by version,
the requests a client sent through the load balancer during a rolling update."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady, api_secret, http_get
from tests.observe._observe import controller_url, get, requests_by_version, scrape, spec_text


def test_metrics_count_each_versions_requests_during_a_rolling_update(
    steady: Steady, tmp_path: Path
) -> None:
    v1 = tmp_path / "v1.yaml"
    v1.write_text(spec_text("v1"))
    v2 = tmp_path / "v2.yaml"
    v2.write_text(spec_text("v2", run="sleep 1 && python3 server.py"))
    steady.run("up", str(v1), "--wait")
    port = int(steady.service("web")["endpoint"].rsplit(":", 1)[1])
    url = controller_url(steady)

    client = LoadClient(port, max_seconds=90).start()
    try:
        time.sleep(1.0)
        steady.run("update", "web", str(v2), "--wait", timeout=120)
        time.sleep(0.5)
    finally:
        client.stop()
    report(f"metrics during a rolling update: {client.summary()}")
    assert client.failed == 0, client.summary()
    sent = Counter(str(json.loads(body)["version"]) for _, body in client.bodies)
    assert set(sent) == {"1", "2"}, sent  # both versions answered during the update

    # The LB reports every half second: wait (bounded) until the scrape has them all.
    deadline = time.monotonic() + 10
    counted: dict[str, float] = {}
    while time.monotonic() < deadline:
        counted = requests_by_version(scrape(url))
        if sum(counted.values()) >= client.sent:
            break
        time.sleep(0.2)
    assert counted == {"1": sent["1"], "2": sent["2"]}, (counted, sent)

    families = scrape(url)
    hist = {
        s.labels["version"]: s.value
        for s in families["steady_lb_request_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    assert hist == {"1": sent["1"], "2": sent["2"]}
    replicas = {
        (s.labels["version"], s.labels["state"]): s.value
        for s in families["steady_replicas"].samples
    }
    assert replicas == {("2", "READY"): 2.0}
    updates = {
        (s.labels["mode"], s.labels["outcome"]): s.value
        for s in families["steady_updates"].samples
        if s.name == "steady_updates_total"
    }
    assert updates == {("rolling", "succeeded"): 1.0}

    # A user's own /metrics route still goes to the replicas, not to SteadyServe's.
    status, body = http_get(port, "/metrics")
    assert b"steady_lb_requests_total" not in body, (status, body[:200])


def test_metrics_and_dashboard_data_need_the_token_when_one_is_set(steady: Steady) -> None:
    env = dict(steady.env, STEADY_TOKEN="s3cret")

    def cli(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "steadyserve.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout

    try:
        page_url = cli("dashboard", "--no-browser").strip()
        # A one-time link: the token is never in a URL a browser's command line shows.
        assert "/dashboard/login?code=" in page_url and "s3cret" not in page_url, page_url
        url = controller_url(steady)
        assert get(url, "/metrics")[0] == 401
        assert get(url, "/api/v1/dashboard")[0] == 401
        assert get(url, "/api/v1/dashboard/timeseries")[0] == 401
        assert get(url, "/dashboard/")[0] == 200  # static files only: no data in them
        # The home's own secret does not stand in for a STEADY_TOKEN that is set.
        home_secret = {"Authorization": f"Bearer {api_secret(steady.home)}"}
        assert get(url, "/api/v1/dashboard", home_secret)[0] == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert "steady_service_version" in scrape(url, auth)
        assert get(url, "/api/v1/dashboard", auth)[0] == 200
    finally:
        cli("controller", "stop")


def test_access_log_turns_on_in_place(steady: Steady, tmp_path: Path) -> None:
    off = tmp_path / "off.yaml"
    off.write_text(spec_text("v1", replicas=1))
    steady.run("up", str(off), "--wait")
    svc = steady.service("web")
    port, pids = int(svc["endpoint"].rsplit(":", 1)[1]), [r["pid"] for r in svc["replicas"]]
    log = steady.home / "services" / "web" / "access.log"
    assert http_get(port, "/")[0] == 200
    assert not log.exists()  # off by default

    on = tmp_path / "on.yaml"
    text = spec_text("v1", replicas=1)
    on.write_text(text.replace("service:\n", "service:\n  access_log: true\n"))
    out = steady.run("update", "web", str(on), "--wait").stdout
    assert "in place" in out, out
    for i in range(5):
        assert http_get(port, f"/?n={i}")[0] == 200
    deadline = time.monotonic() + 10  # the LB flushes its buffer once a second
    lines: list[dict[str, object]] = []
    while time.monotonic() < deadline and len(lines) < 5:
        time.sleep(0.2)
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    assert [x["path"] for x in lines] == [f"/?n={i}" for i in range(5)]
    after = steady.service("web")
    assert [r["pid"] for r in after["replicas"]] == pids
    # Relabelled in place: the log says the version the controller shows.
    assert {x["version"] for x in lines} == {r["version"] for r in after["replicas"]}
