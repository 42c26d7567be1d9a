"""Canary updates end to end, under a bounded client load: the exact share, the
automatic abort on errors and on latency, the commands mid-update, pinning, a
stable replica SIGKILLed mid-step and replaced, and a controller SIGKILL that
resumes the canary at the same step."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady
from tests.observe._observe import controller_url, requests_by_version, scrape

APP = Path(__file__).parent / "apps" / "canary_app.py"


def spec(
    *,
    fail: int = 0,
    delay: float = 0.0,
    replicas: int = 2,
    steps: str = "[{weight: 20}, {pause: {}}, {weight: 100}]",
    analysis: str = "{}",
    marker: str = "v1",
    mode: str = "canary",
    startup: float = 0.0,
    blue_green: str = "{}",
    gate: Path | None = None,
) -> str:
    return textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 10
          replicas: {replicas}
          update_mode: {mode}
          rolling_update: {{max_surge: 1, max_unavailable: 0}}
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
          canary:
            steps: {steps}
            analysis: {analysis}
          blue_green: {blue_green}
        envs:
          FAIL_PERCENT: "{fail}"
          DELAY_S: "{delay}"
          MARKER: {marker}
          STARTUP_S: "{startup}"
          START_GATE: "{gate or ""}"
        run: python3 {APP}
        """)


def up(steady: Steady, tmp: Path, text: str) -> int:
    path = tmp / "v1.yaml"
    path.write_text(text)
    steady.run("up", str(path), "--wait", "--timeout", "60")
    return int(str(steady.service("web")["endpoint"]).rsplit(":", 1)[1])


def update(steady: Steady, tmp: Path, text: str) -> None:
    path = tmp / "v2.yaml"
    path.write_text(text)
    steady.run("update", "web", str(path))


def waiting(svc: dict[str, Any]) -> bool:
    canary = svc.get("canary") or {}
    return canary.get("phase") == "WAITING"


def finished(svc: dict[str, Any]) -> bool:
    return (svc.get("update") or {}).get("status") not in (None, "IN_PROGRESS")


def get(port: int, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/", headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if resp.status in (200, 500) else {"raw": body}
    finally:
        conn.close()


def analysis_events(steady: Steady) -> list[str]:
    svc = json.loads(steady.run("status", "web", "--events", "--json").stdout)["services"][0]
    return [e["reason"] for e in svc["events"] if e["to_status"] == "CANARY_ANALYSIS"]


def canary_events(steady: Steady) -> str:
    return steady.run("status", "web", "--events").stdout


def wait_for_event(steady: Steady, text: str, timeout: float = 30.0) -> str:
    """The events table once it names ``text`` (bounded in time)."""
    deadline = time.monotonic() + timeout
    events = ""
    while time.monotonic() < deadline:
        events = canary_events(steady)
        if text in events:
            return events
        time.sleep(0.2)
    raise AssertionError(f"no event {text!r} within {timeout:g} s:\n{events}")


def test_canary_share_pin_and_promote(steady: Steady, tmp_path: Path) -> None:
    port = up(steady, tmp_path, spec())
    client = LoadClient(port, max_seconds=90).start()
    update(steady, tmp_path, spec(marker="v2"))
    svc = steady.wait_for("web", waiting, timeout=60, what="canary waiting at 20%")
    assert svc["canary"]["weight"] == 20 and svc["update"]["mode"] == "canary"
    # The weight is exact whatever the replica counts (2 stable replicas, 1 canary),
    # measured over all traffic by the load balancer's own per-version counts.
    url = controller_url(steady)
    time.sleep(1.0)  # the LB reports twice a second: let the counts settle
    before = requests_by_version(scrape(url))
    seen: Counter[str] = Counter()
    for _ in range(300):
        status, body = get(port)
        assert status == 200
        seen[body["version"]] += 1
    time.sleep(1.0)
    after = requests_by_version(scrape(url))
    delta = {v: after.get(v, 0.0) - before.get(v, 0.0) for v in ("1", "2")}
    share = delta["2"] / (delta["1"] + delta["2"])
    report(
        f"canary share at weight 20: {share:.1%} of {sum(delta.values()):g} requests "
        f"(this client alone: {seen['2'] / 300:.1%})"
    )
    assert abs(share - 0.20) <= 0.03, delta
    assert seen["1"] and seen["2"], seen
    # Pinning by hand: only that version answers, and the replica never sees the header.
    for version in ("1", "2"):
        status, body = get(port, {"X-Steady-Version": version})
        assert status == 200 and body["version"] == version and body["pin_seen"] is None
    status, body = get(port, {"X-Steady-Version": "7"})
    assert status == 503 and b"no ready replica of version 7" in body["raw"]
    # Commands that do not apply say so in one line, exit 2.
    refused = steady.run("resume", "web", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "not paused" in refused.stderr
    out = steady.run("status", "web").stdout
    assert "canary" in out.lower() and "20%" in out
    # A stable replica SIGKILLed mid-step is replaced with the stable version while
    # the canary holds its step and weight.
    victim = next(r for r in steady.service("web")["replicas"] if r["version"] == 1)
    os.killpg(victim["pid"], signal.SIGKILL)
    healed = steady.wait_for(
        "web",
        lambda s: (
            sum(r["version"] == 1 and r["status"] == "READY" for r in s["replicas"]) == 2
            and all(r["id"] != victim["id"] or r["status"] != "READY" for r in s["replicas"])
        ),
        timeout=30,
        what="a stable replacement READY",
    )
    assert waiting(healed) and healed["canary"]["weight"] == 20, healed["canary"]
    stable = f"stable replica {victim['id']} failed during the canary; replacing it with version 1"
    assert stable in canary_events(steady)
    steady.run("promote", "web")
    svc = steady.wait_for("web", finished, timeout=60, what="canary finished")
    client.stop()
    report(f"canary promoted, a stable replica SIGKILLed on the way: {client.summary()}")
    assert svc["update"]["status"] == "SUCCEEDED", svc["update"]
    assert svc["active_versions"] == [2]
    # A GET is retried on another replica unless its response had begun when the
    # replica died (docs/load-balancer.md): at most that one request is cut.
    assert client.failed == client.errors["IncompleteRead"] <= 1, client.summary()
    again = steady.run("promote", "web", check=False)
    assert again.returncode == 2 and "no update in progress" in again.stderr


def test_canary_failing_30_percent_is_aborted(steady: Steady, tmp_path: Path) -> None:
    port = up(steady, tmp_path, spec())
    client = LoadClient(port, max_seconds=90).start()
    analysis = "{max_error_rate: 0.05, min_requests: 10, interval_s: 2, failure_limit: 1}"
    update(steady, tmp_path, spec(fail=30, analysis=analysis, marker="v2"))
    svc = steady.wait_for("web", finished, timeout=60, what="canary aborted")
    assert svc["update"]["status"] == "FAILED" and "analysis failed" in svc["update"]["message"]
    # The stable version kept its target throughout; the canary's replicas drain.
    svc = steady.wait_for(
        "web",
        lambda s: s["active_versions"] == [1] and {r["version"] for r in s["replicas"]} == {1},
        timeout=30,
        what="canary drained",
    )
    time.sleep(0.5)
    after = client.sent
    time.sleep(0.5)
    client.stop()
    report(f"canary failing 30%: {client.summary()}")
    # Every failure is a 500 of the canary; the stable version failed nothing, and
    # no connection was refused or reset.
    assert set(client.statuses) <= {200, 500} and not client.errors, client.summary()
    assert client.failed == client.statuses[500]
    assert client.failed > 0, "the canary never answered: nothing was judged"
    assert client.sent > after, "the load client stopped early"
    history = steady.run("history", "web").stdout
    assert "failed" in history
    # Bounded by the analysis window: the first check that had min_requests aborted,
    # and the canary failed no more than its share of the windows the checks saw.
    checks = analysis_events(steady)
    outcomes = [reason.split(":", 1)[0] for reason in checks]
    assert outcomes[-1] == "failed" and set(outcomes[:-1]) <= {"inconclusive"}, checks
    seen = sum(int(m.group(1)) for r in checks for m in [re.search(r"canary (\d+) req", r)] if m)
    report(f"   canary requests in the analysis windows: {seen}; failed in all: {client.failed}")
    assert client.failed <= 0.3 * seen * 1.5 + 3, (client.failed, checks)


def test_canary_five_times_slower_is_aborted_on_latency(steady: Steady, tmp_path: Path) -> None:
    # 20 ms against 100 ms: in the LB's latency buckets (..., 25, 50, 100, 250 ms) the
    # canary's p99 lands at 250 ms; the stable one stays at 25-100 ms even when a busy
    # machine slows a few of its requests, so the ratio stays over 1.5.
    port = up(steady, tmp_path, spec(delay=0.02))
    client = LoadClient(port, max_seconds=90).start()
    analysis = "{max_p99_ratio: 1.5, min_requests: 5, interval_s: 2}"
    update(steady, tmp_path, spec(delay=0.1, analysis=analysis, marker="v2"))
    svc = steady.wait_for("web", finished, timeout=60, what="canary aborted on latency")
    client.stop()
    report(f"canary 5x slower: {client.summary()}")
    assert svc["update"]["status"] == "FAILED", svc["update"]
    assert "max_p99_ratio" in svc["update"]["message"]
    assert client.failed == 0, client.summary()


def test_pause_resume_abort_mid_update(steady: Steady, tmp_path: Path) -> None:
    port = up(steady, tmp_path, spec())
    client = LoadClient(port, max_seconds=90).start()
    steps = "[{weight: 20}, {pause: 2}, {weight: 50}, {pause: {}}, {weight: 100}]"
    # The canary replica listens only once the gate opens: step 1 (scaling for 20%)
    # cannot end before `steady pause` has arrived, so the 2 s pause step never starts
    # early (on a loaded machine the pause command came after it had passed).
    gate = tmp_path / "gate"
    update(steady, tmp_path, spec(steps=steps, marker="v2", gate=gate))
    steady.run("pause", "web")
    held = steady.service("web")["canary"]
    assert (held["phase"], held["step"], held["weight"]) == ("PAUSED", 1, 20), held
    gate.touch()
    time.sleep(3)  # longer than scaling and the pause step: a held canary does not move
    still = steady.service("web")["canary"]
    assert (still["phase"], still["step"], still["weight"]) == ("PAUSED", held["step"], 20)
    steady.run("resume", "web")
    svc = steady.wait_for("web", waiting, timeout=60, what="50% and waiting")
    assert svc["canary"]["weight"] == 50
    steady.run("abort", "web")
    svc = steady.wait_for("web", finished, timeout=30, what="aborted")
    assert svc["update"]["status"] == "FAILED" and "steady abort" in svc["update"]["message"]
    steady.wait_for(
        "web",
        lambda s: {r["version"] for r in s["replicas"]} == {1} and s["ready_replicas"] == 2,
        timeout=30,
        what="only the stable version",
    )
    client.stop()
    report(f"canary paused, resumed, aborted: {client.summary()}")
    assert client.failed == 0, client.summary()


def test_controller_sigkill_resumes_the_canary_at_its_step(steady: Steady, tmp_path: Path) -> None:
    port = up(steady, tmp_path, spec())
    client = LoadClient(port, max_seconds=90).start()
    steps = "[{weight: 10}, {weight: 40}, {pause: {}}, {weight: 100}]"
    update(steady, tmp_path, spec(steps=steps, marker="v2"))
    before = steady.wait_for("web", waiting, timeout=60, what="waiting at 40%")["canary"]
    info = json.loads(steady.run("controller", "status", "--json").stdout)
    os.kill(info["pid"], signal.SIGKILL)
    time.sleep(0.3)
    after = steady.wait_for("web", waiting, timeout=60, what="resumed")["canary"]
    assert (after["step"], after["weight"]) == (before["step"], before["weight"]) == (3, 40)
    assert "resumed at step 3" in canary_events(steady)
    steady.run("promote", "web")
    svc = steady.wait_for("web", finished, timeout=60, what="finished")
    client.stop()
    report(f"canary across a controller SIGKILL: {client.summary()}")
    assert svc["update"]["status"] == "SUCCEEDED"
    assert client.failed == 0, client.summary()


def test_rolling_update_pause_resume_and_abort(steady: Steady, tmp_path: Path) -> None:
    port = up(steady, tmp_path, spec(mode="rolling"))
    client = LoadClient(port, max_seconds=90).start()
    # Each new version's replicas listen only once its gate opens: the update cannot
    # move on (nor, for v3, finish) before the test's command has arrived.
    gate = tmp_path / "gate-v2"
    update(steady, tmp_path, spec(mode="rolling", startup=1.5, marker="v2", gate=gate))
    steady.run("pause", "web")
    ids = {r["id"] for r in steady.service("web")["replicas"]}
    gate.touch()
    time.sleep(3)  # a new replica starts in 1.5 s: unpaused, the update would move on
    svc = steady.service("web")
    assert {r["id"] for r in svc["replicas"]} == ids and svc["update"]["status"] == "IN_PROGRESS"
    refused = steady.run("promote", "web", check=False)
    assert refused.returncode == 2 and "canary" in refused.stderr
    assert refused.stderr.count("\n") == 1
    steady.run("resume", "web")
    svc = steady.wait_for("web", finished, timeout=60, what="rolling update done")
    assert svc["update"]["status"] == "SUCCEEDED" and svc["active_versions"] == [2]
    # Abort: the update rolls back at once, the stable version serves throughout.
    v3 = spec(mode="rolling", startup=1.5, marker="v3", gate=tmp_path / "gate-v3")
    (tmp_path / "v3.yaml").write_text(v3)
    steady.run("update", "web", str(tmp_path / "v3.yaml"))
    steady.run("abort", "web")
    svc = steady.wait_for("web", finished, timeout=30, what="aborted")
    assert svc["update"]["status"] == "FAILED" and "steady abort" in svc["update"]["message"]
    steady.wait_for(
        "web",
        lambda s: {r["version"] for r in s["replicas"]} == {2} and s["ready_replicas"] == 2,
        timeout=30,
        what="back on version 2",
    )
    client.stop()
    report(f"rolling update paused, resumed; another aborted: {client.summary()}")
    assert client.failed == 0, client.summary()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def versions_answering(port: int, n: int = 20) -> set[str]:
    return {get(port)[1]["version"] for _ in range(n)}


def test_blue_green_preview_promote_and_instant_abort(steady: Steady, tmp_path: Path) -> None:
    preview = free_port()
    options = f"{{preview_port: {preview}, auto_promote: false, scale_down_delay_s: 60}}"
    port = up(steady, tmp_path, spec(mode="blue_green", blue_green=options))
    client = LoadClient(port, max_seconds=90).start()
    update(steady, tmp_path, spec(mode="blue_green", blue_green=options, marker="v2"))

    def new_ready(svc: dict[str, Any]) -> bool:
        ready = [r for r in svc["replicas"] if r["version"] == 2 and r["status"] == "READY"]
        return len(ready) == 2

    steady.wait_for("web", new_ready, timeout=60, what="every new replica READY")
    # The tick after the new replicas are READY decides: it writes this event and
    # holds, or (wrongly) switches. Poll for the decision: under load that tick came
    # later than the fixed 0.5 s the test used to wait.
    held = wait_for_event(steady, "waiting for steady promote")
    assert steady.service("web")["active_versions"] == [1], held
    # The preview port serves the new version only; the endpoint still the old one.
    steady_wait_port(preview)
    assert versions_answering(preview) == {"2"}
    assert versions_answering(port) == {"1"}
    steady.run("promote", "web")
    steady.wait_for("web", lambda s: s["active_versions"] == [2], timeout=30, what="switch")
    svc = steady.service("web")
    old_ids = {r["id"] for r in svc["replicas"] if r["version"] == 1}
    assert len(old_ids) == 2 and svc["update"]["status"] == "IN_PROGRESS", "kept warm"
    assert versions_answering(port) == {"2"}
    # Abort within scale_down_delay_s: back to the warm old replicas, no launch.
    steady.run("abort", "web")
    svc = steady.wait_for("web", lambda s: s["active_versions"] == [1], timeout=30, what="back")
    assert {r["id"] for r in svc["replicas"] if r["version"] == 1} == old_ids
    assert svc["update"]["status"] == "FAILED"
    steady.wait_for(
        "web", lambda s: {r["version"] for r in s["replicas"]} == {1}, timeout=30, what="drained"
    )
    client.stop()
    report(f"blue-green preview, promote, abort: {client.summary()}")
    assert client.failed == 0, client.summary()
    assert versions_answering(port) == {"1"}


def steady_wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on the preview port {port}")
