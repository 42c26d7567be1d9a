"""Updates under steady client load: rolling, blue-green, in place, failed, deploy, rollback.

Every test runs a bounded background client throughout and prints how many
requests it sent and how many failed; the contract is zero failed.
"""

from __future__ import annotations

import http.client
import json
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.figures import report
from tests.helpers.raycluster import BACKENDS
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, http_get

SERVER = EXAMPLES / "http_server"


def spec_text(
    name: str = "web",
    replicas: int = 2,
    message: str = "v1",
    mode: str = "rolling",
    run: str = "python3 server.py",
    user_config: str | None = None,
    extra: str = "",
) -> str:
    config = (
        f"\n  user_config: {user_config}\n  reconfigure_path: /-/reconfigure" if user_config else ""
    )
    return (
        textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 10
            timeout_seconds: 2
          replicas: {replicas}
          update_mode: {mode}
          update_deadline_s: 60
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
        """)
        + (f"  {extra}\n" if extra else "")
        + config.lstrip("\n")
        + ("\n" if config else "")
        + textwrap.dedent(f"""\
        workdir: {SERVER}
        envs:
          MESSAGE: {message}
        run: {run}
        """)
    )


def write(tmp: Path, text: str, filename: str) -> Path:
    path = tmp / filename
    path.write_text(text)
    return path


def port_of(svc: dict[str, Any]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def messages(client: LoadClient) -> list[tuple[float, str]]:
    return [(t, json.loads(body)["message"]) for t, body in client.bodies]


def pids(svc: dict[str, Any]) -> list[int]:
    return sorted(r["pid"] for r in svc["replicas"] if r["status"] == "READY")


def start(steady: Steady, tmp: Path, **kw: Any) -> tuple[dict[str, Any], LoadClient]:
    steady.run("up", str(write(tmp, spec_text(**kw), "v1.yaml")), "--wait", "--timeout", "60")
    svc = steady.service(kw.get("name", "web"))
    return svc, LoadClient(port_of(svc), max_seconds=90).start()


def finish(client: LoadClient, label: str) -> None:
    # At least 50 requests, on a loaded machine too: the update may end before the
    # client has sent many, and then the ones after it count as well (bounded).
    deadline = time.monotonic() + 30
    while client.sent <= 50 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    client.stop()
    report(f"{label}: {client.summary()}")
    assert client.sent > 50, "the load client barely ran"
    assert client.failed == 0, client.summary()


@pytest.mark.parametrize("steady", BACKENDS, indirect=True)
def test_rolling_update_drops_nothing(steady: Steady, tmp_path: Path) -> None:
    svc, client = start(steady, tmp_path)
    old_pids = pids(svc)
    time.sleep(0.3)
    v2 = write(tmp_path, spec_text(message="v2"), "v2.yaml")
    out = steady.run("update", "web", str(v2), "--wait", "--timeout", "60").stdout
    assert "restart, rolling" in out and "envs" in out
    marker = time.time()
    time.sleep(0.5)
    finish(client, "rolling update")
    seen = messages(client)
    assert {m for _, m in seen} == {"v1", "v2"}
    assert {m for t, m in seen if t > marker} == {"v2"}
    after = steady.service("web")
    assert after["version"] == 2 and after["active_versions"] == [2]
    assert after["update"]["status"] == "SUCCEEDED" and after["update"]["mode"] == "rolling"
    assert not set(pids(after)) & set(old_pids)
    history = steady.run("history", "web").stdout
    assert "rolling" in history and "active" in history


@pytest.mark.parametrize("steady", BACKENDS, indirect=True)
def test_blue_green_switches_at_once(steady: Steady, tmp_path: Path) -> None:
    _, client = start(steady, tmp_path, mode="blue_green", replicas=3)
    time.sleep(0.3)
    v2 = write(tmp_path, spec_text(message="v2", mode="blue_green", replicas=3), "v2.yaml")
    steady.run("update", "web", str(v2), "--wait", "--timeout", "60")
    finish(client, "blue-green update")
    seen = messages(client)
    first_new = min(t for t, m in seen if m == "v2")
    # Requests sent after the first v2 answer never reach v1.
    late_old = [t for t, m in seen if m == "v1" and t > first_new]
    assert not late_old, f"{len(late_old)} requests got v1 after the switch"
    assert {m for _, m in seen} == {"v1", "v2"}


def test_replica_count_change_is_in_place(steady: Steady, tmp_path: Path) -> None:
    svc, client = start(steady, tmp_path)
    before = pids(svc)
    dry = steady.run(
        "update", "web", str(write(tmp_path, spec_text(replicas=3), "v2.yaml")), "--dry-run"
    ).stdout
    assert "in place" in dry and "service.replicas" in dry
    assert steady.service("web")["version"] == 1  # a dry run changes nothing
    steady.run("update", "web", str(tmp_path / "v2.yaml"), "--wait", "--timeout", "60")
    after = steady.wait_for("web", lambda s: s["ready_replicas"] == 3, what="3 ready")
    finish(client, "in-place scale-up")
    assert after["version"] == 2 and after["update"]["mode"] == "in_place"
    assert set(before) <= set(pids(after))
    assert {r["version"] for r in after["replicas"]} == {2}


@pytest.mark.parametrize("steady", BACKENDS, indirect=True)
def test_user_config_is_delivered_in_place(steady: Steady, tmp_path: Path) -> None:
    svc, client = start(steady, tmp_path, user_config="{message: french}")
    before = pids(svc)
    v2 = write(tmp_path, spec_text(user_config="{message: german}"), "v2.yaml")
    steady.run("update", "web", str(v2), "--wait", "--timeout", "60")
    marker = time.time()
    time.sleep(0.5)
    finish(client, "user_config in place")
    assert {m for t, m in messages(client) if t > marker} == {"german"}
    after = steady.service("web")
    assert pids(after) == before and after["version"] == 2

    # The reconfigure path is a control endpoint: clients cannot reach it.
    for path in ("/-/reconfigure", "/-/%72econfigure", "//-/reconfigure?x=1"):
        conn = http.client.HTTPConnection("127.0.0.1", port_of(after), timeout=5)
        conn.request("POST", path, body=b'{"message": "hijacked"}')
        assert conn.getresponse().status == 404, path
        conn.close()
    assert json.loads(http_get(port_of(after))[1])["message"] == "german"

    # A config the replicas refuse fails the update and the old one stays.
    bad = write(tmp_path, spec_text(user_config="{message: 42}"), "bad.yaml")
    proc = steady.run("update", "web", str(bad), "--wait", "--timeout", "60", check=False)
    assert proc.returncode == 1 and "FAILED" in proc.stderr
    svc = steady.wait_for("web", lambda s: s["ready_replicas"] == 2, what="2 ready again")
    assert svc["version"] == 2
    assert json.loads(http_get(port_of(svc))[1])["message"] == "german"


@pytest.mark.parametrize("steady", BACKENDS, indirect=True)
def test_failed_update_rolls_back_by_itself(steady: Steady, tmp_path: Path) -> None:
    svc, client = start(steady, tmp_path)
    before = pids(svc)
    broken = write(tmp_path, spec_text(message="v2", run="echo broken; exit 1"), "v2.yaml")
    proc = steady.run("update", "web", str(broken), "--wait", "--timeout", "60", check=False)
    assert proc.returncode == 1 and "FAILED" in proc.stderr
    after = steady.wait_for(
        "web",
        lambda s: (
            all(r["version"] == 1 for r in s["replicas"] if r["status"] == "READY")
            and s["ready_replicas"] == 2
            and s["total_replicas"] == 2
        ),
        what="old version only",
    )
    finish(client, "failed update")
    assert {m for _, m in messages(client)} == {"v1"}
    assert after["status"] == "READY" and after["version"] == 1
    assert after["update"]["status"] == "FAILED" and "rolled back" in after["update"]["message"]
    assert pids(after) == before
    events = steady.run("status", "web", "--events").stdout
    assert "UPDATE_FAILED" in events


def test_deploy_twice_changes_nothing_then_rollback(steady: Steady, tmp_path: Path) -> None:
    def fleet(message: str) -> str:
        items = [spec_text(name=n, replicas=1, message=message) for n in ("alpha", "beta")]
        body = "".join("  - " + textwrap.indent(item, "    ").lstrip() for item in items)
        return "services:\n" + body

    path = write(tmp_path, fleet("v1"), "fleet.yaml")
    steady.run("deploy", str(path), "--wait", "--timeout", "60")
    first = {s["name"]: s for s in steady.status()["services"]}
    assert set(first) == {"alpha", "beta"}
    out = steady.run("deploy", str(path), "--wait").stdout
    assert out.count("no change") == 2
    second = {s["name"]: s for s in steady.status()["services"]}
    for name in first:
        assert second[name]["version"] == first[name]["version"] == 1
        assert pids(second[name]) == pids(first[name])

    client = LoadClient(port_of(first["alpha"]), max_seconds=90).start()
    write(tmp_path, fleet("v2"), "fleet.yaml")
    steady.run("deploy", str(path), "--wait", "--timeout", "60")
    assert json.loads(http_get(port_of(first["alpha"]))[1])["message"] == "v2"
    steady.run("rollback", "alpha", "--wait", "--timeout", "60")
    alpha = steady.service("alpha")
    assert alpha["version"] == 3
    assert json.loads(http_get(port_of(alpha))[1])["message"] == "v1"
    finish(client, "deploy + rollback")
    history = steady.run("history", "alpha").stdout
    assert "rollback to version 1" in history

    # A service missing from the file goes down, with its processes.
    alpha_procs = [psutil.Process(pid) for pid in pids(steady.service("alpha"))]
    only_beta = (
        "services:\n  - "
        + textwrap.indent(spec_text(name="beta", replicas=1, message="v2"), "    ").lstrip()
    )
    write(tmp_path, only_beta, "fleet.yaml")
    refused = steady.run("deploy", str(path), check=False)  # no terminal to ask on, no -y
    assert refused.returncode == 2, refused.stderr
    assert "deploy takes down alpha: pass -y" in refused.stderr
    assert {s["name"] for s in steady.status()["services"]} == {"alpha", "beta"}
    steady.run("deploy", str(path), "-y")
    assert [s["name"] for s in steady.status()["services"]] == ["beta"]
    assert not any(p.is_running() for p in alpha_procs)


@pytest.mark.parametrize("steady", BACKENDS, indirect=True)
def test_scale_down_drains_in_flight_requests(steady: Steady, tmp_path: Path) -> None:
    text = spec_text().replace("graceful_shutdown_timeout_s: 3", "graceful_shutdown_timeout_s: 15")
    steady.run("up", str(write(tmp_path, text, "v1.yaml")), "--wait")
    port = port_of(steady.service("web"))
    gate = tmp_path / "gate"
    # One held stream per replica (least-load sends the second to the idle one).
    streams = []
    for _ in range(2):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", f"/stream?n=3&interval=0.01&gate={gate}")
        resp = conn.getresponse()
        resp.fp.readline()
        streams.append((conn, resp, resp.fp.readline()))
    assert {line.split()[-1] for _, _, line in streams} == {b"replica-1", b"replica-2"}

    smaller = text.replace("replicas: 2", "replicas: 1")
    steady.run("update", "web", str(write(tmp_path, smaller, "v2.yaml")))
    svc = steady.wait_for(
        "web",
        lambda s: any(r["status"] == "SHUTTING_DOWN" for r in s["replicas"]),
        what="a replica draining",
    )
    time.sleep(1.0)  # draining waits for the held stream, well past the wait loop
    svc = steady.service("web")
    assert [r["status"] for r in svc["replicas"]].count("SHUTTING_DOWN") == 1
    gate.touch()
    for conn, resp, _ in streams:
        rest = b""
        while not rest.endswith(b"\r\n0\r\n\r\n"):  # raw chunked bytes to the last chunk
            line = resp.fp.readline()
            assert line, f"stream cut off after {rest!r}"
            rest += line
        assert rest.count(b"data: token-") == 2
        conn.close()
    svc = steady.wait_for("web", lambda s: len(s["replicas"]) == 1, what="drained and stopped")
    assert svc["replicas"][0]["status"] == "READY"
    events = steady.run("status", "web", "--events").stdout
    assert "STOPPED" in events


def test_rollback_after_old_replicas_drained_relaunches_the_old_spec(
    steady: Steady, tmp_path: Path
) -> None:
    # One replica at a time (no surge): v2's first replica turns READY and a v1 replica
    # is drained for it; v2's second never gets ready, so the update misses its deadline.
    # The rollback must launch v1 again with v1's spec (message v1), not v2's.
    policy = "rolling_update: {max_surge: 0, max_unavailable: 1}"
    _, client = start(steady, tmp_path, extra=policy)
    run = "bash -c 'if [ $STEADY_REPLICA_ID = 4 ]; then sleep 60; else exec python3 server.py; fi'"
    stuck = spec_text(message="v2", run=run, extra=policy)
    stuck = stuck.replace("update_deadline_s: 60", "update_deadline_s: 4")
    proc = steady.run(
        "update",
        "web",
        str(write(tmp_path, stuck, "v2.yaml")),
        "--wait",
        "--timeout",
        "90",
        check=False,
    )
    assert proc.returncode == 1 and "update_deadline_s" in proc.stderr, proc.stderr
    svc = steady.wait_for(
        "web",
        lambda s: (
            s["ready_replicas"] == 2
            and s["total_replicas"] == 2
            and all(r["version"] == 1 for r in s["replicas"] if r["status"] == "READY")
        ),
        timeout=60,
        what="v1 back at full strength",
    )
    client.stop()
    report(f"rollback after a drain (max_unavailable 1): {client.summary()}")
    assert client.failed == 0, client.summary()
    assert max(r["id"] for r in svc["replicas"]) >= 5  # v1 was launched again
    assert {json.loads(http_get(port_of(svc))[1])["message"] for _ in range(6)} == {"v1"}
