"""End to end on the local backend: a real controller, load balancer and replicas.

Each test has its own STEADY_HOME; probe intervals and delays are short in the
service files below so the suite stays fast without skipping anything.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.figures import report
from tests.helpers.raycluster import BACKENDS, HEAD_IP, WORKER_IP
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, http_get

# Every test here runs on both backends: local processes, and a two-node Ray cluster.
pytestmark = pytest.mark.parametrize("steady", BACKENDS, indirect=True)

SERVER = EXAMPLES / "http_server"


def service_file(
    tmp: Path,
    name: str = "web",
    replicas: int = 2,
    extra: str = "",
    run: str = "python3 server.py",
    workdir: Path = SERVER,
) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 20
            timeout_seconds: 2
          replicas: {replicas}
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
          {extra}
        workdir: {workdir}
        run: {run}
        """)
    )
    return path


def up_ready(steady: Steady, path: Path, name: str) -> dict[str, object]:
    steady.run("up", str(path), "--wait", "--timeout", "60")
    svc = steady.service(name)
    assert svc["status"] == "READY"
    return svc


def port_of(svc: dict[str, object]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def test_two_replicas_both_answer_status_and_down(steady: Steady, tmp_path: Path) -> None:
    svc = up_ready(steady, service_file(tmp_path), "web")
    assert svc["ready_replicas"] == 2 and svc["total_replicas"] == 2
    assert svc["active_versions"] == [1] and svc["version"] == 1
    port = port_of(svc)
    if steady.backend == "ray":
        assert {r["ip"] for r in svc["replicas"]} == {HEAD_IP, WORKER_IP}  # type: ignore[union-attr]
    seen = set()
    for _ in range(20):
        status, body = http_get(port)
        assert status == 200
        seen.add(json.loads(body)["replica_id"])
    assert seen == {"1", "2"}

    replicas = svc["replicas"]
    assert isinstance(replicas, list)
    for rep in replicas:
        assert set(rep) >= {
            "id",
            "version",
            "status",
            "ip",
            "port",
            "pid",
            "launched_at",
            "resources",
            "region",
        }
        assert rep["status"] == "READY"
        if steady.backend == "ray":  # spread over both nodes, each at its node's address
            assert rep["region"] != "local" and str(rep["resources"]).startswith("1x Ray(")
        else:
            assert rep["ip"] == "127.0.0.1" and rep["region"] == "local"
        env = psutil.Process(rep["pid"]).environ()
        assert env["STEADY_REPLICA_ID"] == env["SKYPILOT_SERVE_REPLICA_ID"] == str(rep["id"])
        assert env["STEADY_SERVICE_NAME"] == "web" and env["STEADY_SERVICE_VERSION"] == "1"
        assert env["PORT"] == str(rep["port"])

    table = steady.run("status").stdout
    lines = [line.split() for line in table.splitlines() if line.strip()]
    assert lines[0] == ["Services"]
    assert lines[1] == ["NAME", "VERSION", "UPTIME", "STATUS", "REPLICAS", "ENDPOINT"]
    assert lines[2][0] == "web" and lines[2][1] == "1" and "READY" in lines[2]
    assert lines[2][-2:] == ["2/2", f"127.0.0.1:{port}"]
    header = ["SERVICE_NAME", "ID", "VERSION", "IP", "LAUNCHED", "RESOURCES", "STATUS", "REGION"]
    assert header in lines

    log = steady.run("logs", "web", "1", "--tail", "5").stdout
    assert "replica 1 (version 1) listening" in log
    assert steady.run("logs", "web", "--load-balancer").returncode == 0
    follow = subprocess.Popen(
        [sys.executable, "-m", "steadyserve.cli", "logs", "web", "2", "--follow", "--tail", "1"],
        env=steady.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "listening" in (follow.stdout.readline() if follow.stdout else "")
    finally:
        follow.terminate()
        follow.wait(timeout=10)

    events = steady.run("status", "web", "--events").stdout
    assert "STARTING" in events and "readiness probe passed" in events

    steady.run("down", "web")
    assert steady.status()["services"] == []
    # Its load balancer and replicas are gone. (Not "the port refuses": the port is
    # free once the service is gone, and a test running beside this one may take it.)
    gone = [svc["load_balancer_pid"], *(r["pid"] for r in replicas)]
    assert [pid for pid in gone if psutil.pid_exists(pid)] == [], gone


def test_sigkill_replica_under_load_costs_no_get(steady: Steady, tmp_path: Path) -> None:
    svc = up_ready(steady, service_file(tmp_path), "web")
    port = port_of(svc)
    victim = svc["replicas"][0]  # type: ignore[index]
    clients = [LoadClient(port, max_seconds=60).start() for _ in range(4)]
    time.sleep(0.5)
    os.killpg(victim["pid"], signal.SIGKILL)
    # On Ray the controller learns of the exit from a poll of the actor (every 0.5 s):
    # the failed probes (every 0.2 s here) may tell first.
    gone = {"FAILED", "FAILED_PROBING"} if steady.backend == "ray" else {"FAILED"}
    replaced = steady.wait_for(
        "web",
        lambda s: (
            s["ready_replicas"] == 2
            and all(r["id"] != victim["id"] or r["status"] in gone for r in s["replicas"])
        ),
        what="a replacement replica READY",
    )
    time.sleep(0.5)
    for client in clients:
        client.stop()
    sent = sum(c.sent for c in clients)
    failed = sum(c.failed for c in clients)
    report(f"SIGKILL under load: requests sent={sent} failed={failed}")
    for c in clients:
        report(f"   {c.summary()}")
    assert sent > 100
    # A GET that had not started its response is retried on the other replica, so it
    # never fails. One whose response had begun when the replica died can only be
    # cut (docs/load-balancer.md): at most the one each client had in flight there.
    for c in clients:
        assert c.failed == c.errors["IncompleteRead"] <= 1, c.summary()
    ids = {r["id"]: r["status"] for r in replaced["replicas"]}
    assert ids[victim["id"]] in gone
    assert max(ids) == 3 and ids[3] == "READY"


def test_sse_stream_arrives_token_by_token(steady: Steady, tmp_path: Path) -> None:
    svc = up_ready(steady, service_file(tmp_path, replicas=1), "web")
    gate = tmp_path / "gate"
    conn = http.client.HTTPConnection("127.0.0.1", port_of(svc), timeout=10)
    conn.request("GET", f"/stream?n=4&interval=0.01&gate={gate}")
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type") == "text/event-stream"
    # The replica holds the rest of the stream until the gate exists: the first
    # event can only arrive here if the load balancer forwards it unbuffered.
    first = resp.fp.readline()
    assert first.strip()  # chunk size line
    data = resp.fp.readline()
    assert data.startswith(b"data: token-0")
    gate.touch()
    rest = b""
    while b"0\r\n\r\n" not in rest:
        line = resp.fp.readline()
        assert line, "stream ended early"
        rest += line
    assert rest.count(b"data: token-") == 3
    conn.close()


def test_controller_crash_keeps_traffic_and_readopts(steady: Steady, tmp_path: Path) -> None:
    svc = up_ready(steady, service_file(tmp_path), "web")
    pids = sorted(r["pid"] for r in svc["replicas"])  # type: ignore[union-attr]
    info = json.loads(steady.run("controller", "status", "--json").stdout)
    client = LoadClient(port_of(svc), max_seconds=30).start()
    os.kill(info["pid"], signal.SIGKILL)
    time.sleep(1.0)
    after = steady.wait_for("web", lambda s: s["ready_replicas"] == 2, what="re-adopted")
    client.stop()
    report(f"controller SIGKILL: {client.summary()}")
    assert client.failed == 0 and client.sent > 50
    assert sorted(r["pid"] for r in after["replicas"]) == pids
    new_info = json.loads(steady.run("controller", "status", "--json").stdout)
    assert new_info["pid"] != info["pid"]


def test_broken_version_is_not_relaunched(steady: Steady, tmp_path: Path) -> None:
    path = service_file(tmp_path, name="broken", run="echo starting; echo no model here; exit 1")
    waited = steady.run("up", str(path), "--wait", "--timeout", "60", check=False)
    # --wait names the cause: the replica's exit and, on this machine, its last words.
    assert waited.returncode == 1, waited.stderr
    assert "exited with code 1 before it was ready" in waited.stderr
    if steady.backend == "local":
        assert "its last output: starting | no model here" in waited.stderr
    svc = steady.wait_for("broken", lambda s: s["status"] == "FAILED", what="FAILED")
    time.sleep(1.0)
    svc = steady.service("broken")
    assert svc["status"] == "FAILED"
    assert all(r["status"].startswith("FAILED") for r in svc["replicas"])
    assert max(r["id"] for r in svc["replicas"]) == 2  # no crash loop
    proc = steady.run("up", str(path), "--wait", "--timeout", "5", check=False)
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_bad_input_exits_2_and_changes_nothing(steady: Steady, tmp_path: Path) -> None:
    missing = steady.run("up", str(tmp_path / "nope.yaml"), check=False)
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr
    assert "Traceback" not in missing.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("service:\n  replica_policy:\n    min_replicas: 1\n    max_replica: 3\nrun: x\n")
    proc = steady.run("up", str(bad), check=False)
    assert proc.returncode == 2
    assert (
        "service.replica_policy.max_replica: unknown field (did you mean max_replicas?)"
        in proc.stderr
    )
    assert len(proc.stderr.strip().splitlines()) == 1

    for args in (["down", "ghost"], ["logs", "ghost"], ["status", "ghost"]):
        proc = steady.run(*args, check=False)
        assert proc.returncode == 2, args
        assert "ghost" in proc.stderr and "Traceback" not in proc.stderr

    with psutil_listening_port() as port:
        taken = service_file(tmp_path, name="taken", extra=f"port: {port}")
        proc = steady.run("up", str(taken), check=False)
        assert proc.returncode == 2 and f"port {port}" in proc.stderr
    assert steady.status()["services"] == []


class psutil_listening_port:
    """A port held by a listening socket for the duration of the block."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
