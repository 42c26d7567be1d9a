"""Autoscaling end to end: real controller, load balancer and Python replicas.

Delays and look-back periods are a few seconds in the service files below, so
a whole scale-up and scale-down takes well under a minute. Every test records
the replica counts it saw over time in the figures CI prints, and asserts that
no request failed while the service scaled.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady, http_get

APPS = Path(__file__).parent / "apps"


def service_file(tmp: Path, name: str, policy: str, extra: str = "") -> Path:
    """A Python replica (``Slow``) with short probe and drain periods and ``policy``
    as its ``replica_policy`` block (indented YAML lines)."""
    path = tmp / f"{name}.yaml"
    body = textwrap.indent(textwrap.dedent(policy).strip(), " " * 4)
    path.write_text(
        textwrap.dedent("""\
        name: {name}
        import_path: autoscale_apps:Slow
        workdir: {workdir}
        service:
          readiness_probe:
            path: /
            initial_delay_seconds: 30
            timeout_seconds: 2
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 5
        {extra}
          replica_policy:
        {body}
        """).format(name=name, workdir=APPS, extra=textwrap.indent(extra, "  "), body=body)
    )
    return path


def port_of(svc: dict[str, Any]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


@dataclass
class Timeline:
    """Replica counts seen while polling ``status``: (seconds, ready, total, target)."""

    start: float = field(default_factory=time.monotonic)
    points: list[tuple[float, int, int, int]] = field(default_factory=list)

    def wait_for(
        self, steady: Steady, name: str, predicate: Any, what: str, timeout: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        svc: dict[str, Any] = {}
        while time.monotonic() < deadline:
            svc = steady.service(name)
            self.points.append(
                (
                    round(time.monotonic() - self.start, 1),
                    svc["ready_replicas"],
                    svc["total_replicas"],
                    svc["target_replicas"],
                )
            )
            if predicate(svc):
                return svc
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}: {json.dumps(svc, indent=1)}")

    def changes(self) -> str:
        """The points where a count changed, as ``t=3.1s ready/total/target=1/3/3``."""
        shown, last = [], None
        for t, ready, total, target in self.points:
            if (ready, total, target) != last:
                shown.append(f"t={t}s {ready}/{total}/{target}")
                last = (ready, total, target)
        return "ready/total/target: " + ", ".join(shown)


def events(steady: Steady, name: str) -> list[str]:
    out = steady.run("status", name, "--json", "--events").stdout
    svc = json.loads(out)["services"][0]
    return [e["reason"] for e in svc["events"] if e["to_status"] == "AUTOSCALE"]


def test_ongoing_requests_scale_1_to_3_and_back_without_a_failed_request(
    steady: Steady, tmp_path: Path
) -> None:
    path = service_file(
        tmp_path,
        "slow",
        """\
        min_replicas: 1
        max_replicas: 3
        target_ongoing_requests: 1
        look_back_period_s: 2
        upscale_delay_s: 1
        downscale_delay_s: 3
        """,
    )
    steady.run("up", str(path), "--wait", "--timeout", "90")
    svc = steady.service("slow")
    assert svc["ready_replicas"] == 1 and svc["target_replicas"] == 1
    assert svc["autoscaling"]["policy"] == "ongoing_requests"
    port = port_of(svc)
    timeline = Timeline()
    clients = [LoadClient(port, path="/?s=0.3", max_seconds=90).start() for _ in range(6)]
    try:
        up = timeline.wait_for(
            steady, "slow", lambda s: s["ready_replicas"] == 3, "3 READY replicas under load"
        )
        assert up["target_replicas"] == 3
        assert up["autoscaling"]["current_ongoing"] > 1
        table = steady.run("status", "slow", "-v").stdout
        assert "AUTOSCALING_POLICY" in table and "LOAD_BALANCING_POLICY" in table
        assert "ongoing 1/replica [1..3]" in table and "least_load" in table
        assert "slow: target 3 replicas (ongoing 1/replica [1..3]);" in table
        time.sleep(2.0)  # all three serve for a while
    finally:
        for client in clients:
            client.stop()
    under_load = len(timeline.points)
    timeline.wait_for(
        steady,
        "slow",
        lambda s: s["total_replicas"] == 1 and s["ready_replicas"] == 1,
        "back to 1 replica once idle",
    )
    sent = sum(c.sent for c in clients)
    failed = sum(c.failed for c in clients)
    report(f"autoscale 1->3->1, 6 slow clients: sent={sent} failed={failed}; {timeline.changes()}")
    assert failed == 0, [c.summary() for c in clients]
    assert sent > 30
    reasons = events(steady, "slow")
    up_reasons = [r for r in reasons if "-> 3 replicas" in r]
    assert any(r.startswith(("ongoing", "burst: ongoing")) for r in up_reasons), reasons
    assert any(r.startswith("ongoing") and "-> 1 replica" in r for r in reasons), reasons
    # No flapping: the target only rose under load, and only fell once it stopped.
    targets = [target for _, _, _, target in timeline.points]
    assert targets[:under_load] == sorted(targets[:under_load]), timeline.changes()
    idle = targets[under_load:]
    assert idle == sorted(idle, reverse=True), timeline.changes()


def test_scale_to_zero_holds_first_requests_and_goes_back_to_zero(
    steady: Steady, tmp_path: Path
) -> None:
    path = service_file(
        tmp_path,
        "cold",
        """\
        min_replicas: 0
        max_replicas: 2
        target_ongoing_requests: 50
        look_back_period_s: 1
        upscale_delay_s: 1
        downscale_delay_s: 2
        downscale_to_zero_delay_s: 2
        """,
        extra="cold_start_timeout_s: 60\n",
    )
    steady.run("up", str(path), "--wait", "--timeout", "90")
    svc = steady.service("cold")
    assert svc["target_replicas"] == 0 and svc["total_replicas"] == 0
    port = port_of(svc)
    timeline = Timeline()

    # One request at zero: held, answered by the first replica that becomes ready.
    started = time.monotonic()
    status, body = http_get(port, "/?s=0", timeout=60)
    first_byte = time.monotonic() - started
    assert (status, body) == (200, b"ok")
    reasons = events(steady, "cold")
    assert any("request waiting at zero -> 1 replica" in r for r in reasons), reasons
    timeline.wait_for(steady, "cold", lambda s: s["total_replicas"] == 0, "back to zero once idle")

    # 20 concurrent first requests at zero: all held, all answered 200.
    def one(_: int) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("GET", "/?s=0.1")
            response = conn.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            return -1
        finally:
            conn.close()

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(one, range(20)))
    assert statuses == [200] * 20, statuses
    timeline.wait_for(
        steady, "cold", lambda s: s["total_replicas"] == 0, "back to zero again", timeout=60
    )
    report(
        f"scale to zero: first request answered after {first_byte:.2f}s at zero;"
        f" 20 concurrent first requests: {statuses.count(200)}/20 200; {timeline.changes()}"
    )


def test_requests_held_at_zero_get_503_after_cold_start_timeout(
    steady: Steady, tmp_path: Path
) -> None:
    """A replica that never becomes ready: held requests end with a clear 503."""
    path = tmp_path / "never.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: never
        workdir: {tmp_path}
        run: sleep 600
        service:
          readiness_probe:
            path: /
            initial_delay_seconds: 60
            timeout_seconds: 1
          health_check_period_s: 0.2
          graceful_shutdown_timeout_s: 1
          cold_start_timeout_s: 1.5
          replica_policy:
            min_replicas: 0
            max_replicas: 1
            target_ongoing_requests: 1
        """)
    )
    steady.run("up", str(path))
    svc = steady.wait_for("never", lambda s: s["status"] == "NO_REPLICA", what="NO_REPLICA")
    status, body = http_get(port_of(svc), "/", timeout=30)
    assert status == 503
    assert b"scaled to zero" in body and b"cold_start_timeout_s=1.5" in body
    # It asked for a replica at once, and one is starting.
    assert steady.service("never")["target_replicas"] == 1


def test_qps_policy_scales_on_request_rate(steady: Steady, tmp_path: Path) -> None:
    """SkyServe's policy: fast requests (no ongoing load to speak of) still scale by rate."""
    path = service_file(
        tmp_path,
        "rate",
        """\
        min_replicas: 1
        max_replicas: 2
        target_qps_per_replica: 0.5
        upscale_delay_seconds: 1
        downscale_delay_seconds: 600
        decision_interval_s: 1
        """,
    )
    steady.run("up", str(path), "--wait", "--timeout", "90")
    svc = steady.service("rate")
    assert svc["autoscaling"]["policy"] == "qps" and svc["target_replicas"] == 1
    timeline = Timeline()
    client = LoadClient(port_of(svc), path="/?s=0", max_seconds=60).start()
    try:
        up = timeline.wait_for(
            steady, "rate", lambda s: s["ready_replicas"] == 2, "2 READY replicas by rate"
        )
    finally:
        client.stop()
    report(f"autoscale by qps 1->2: {client.summary()}; {timeline.changes()}")
    assert client.failed == 0 and client.sent > 0
    assert up["autoscaling"]["current_qps"] > 0.5
    assert any(
        r.startswith(("qps", "burst: qps")) and "-> 2 replicas" in r for r in events(steady, "rate")
    )


def test_rolling_update_under_changing_load_follows_the_autoscaler(
    steady: Steady, tmp_path: Path
) -> None:
    """An update sizes the new version to the autoscaler's target, and the load
    changes mid-update: no failed request, no launch/stop ping-pong."""
    policy = """\
        min_replicas: 1
        max_replicas: 3
        target_ongoing_requests: 1
        look_back_period_s: 2
        upscale_delay_s: 1
        downscale_delay_s: 3
        """
    path = service_file(tmp_path, "upd", policy)
    steady.run("up", str(path), "--wait", "--timeout", "90")
    port = port_of(steady.service("upd"))
    timeline = Timeline()
    clients = [LoadClient(port, path="/?s=0.3", max_seconds=120).start() for _ in range(6)]
    try:
        timeline.wait_for(steady, "upd", lambda s: s["ready_replicas"] == 3, "3 READY under load")
        path.write_text(path.read_text().replace("service:\n", "envs:\n  WAVE: '2'\nservice:\n", 1))
        steady.run("update", "upd", str(path))
        time.sleep(1.0)
    finally:
        for client in clients:
            client.stop()  # the load stops while the update runs
    timeline.wait_for(
        steady,
        "upd",
        lambda s: (
            s["version"] == 2 and s["update"]["status"] == "SUCCEEDED" and s["total_replicas"] == 1
        ),
        "update done and back to 1 replica",
        timeout=90,
    )
    sent = sum(c.sent for c in clients)
    failed = sum(c.failed for c in clients)
    report(f"rolling update under changing load: sent={sent} failed={failed}; {timeline.changes()}")
    assert failed == 0, [c.summary() for c in clients]
    # Never more live replicas than the target allows with the update's surge (100%).
    assert max(total for _, _, total, _ in timeline.points) <= 6, timeline.changes()
    # No ping-pong: once the load stopped, the target only went down.
    targets = [target for _, _, _, target in timeline.points]
    peak = max(i for i, t in enumerate(targets) if t == 3)
    assert targets[peak:] == sorted(targets[peak:], reverse=True), timeline.changes()
