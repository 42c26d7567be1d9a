"""Faults and bad input: a crashed load balancer, replicas that never get ready,
files that are not service files, a private state directory, a token."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from steadyserve.store import Store
from tests.e2e.test_updates import port_of, spec_text, write
from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady, http_get

APPS = Path(__file__).parent / "apps"


def test_load_balancer_crash_is_restarted_on_the_same_port(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(write(tmp_path, spec_text(), "v1.yaml")), "--wait")
    svc = steady.service("web")
    port, lb_pid = port_of(svc), svc["load_balancer_pid"]
    clients = [LoadClient(port, max_seconds=60).start() for _ in range(2)]
    time.sleep(0.3)
    os.kill(lb_pid, signal.SIGKILL)
    restarted = steady.wait_for(
        "web", lambda s: s["load_balancer_pid"] not in (None, lb_pid), what="a new LB"
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if http_get(port, timeout=1)[0] == 200:
                break
        except OSError:
            time.sleep(0.05)
    time.sleep(0.5)
    for c in clients:
        c.stop()
    failed = sum(c.failed for c in clients)
    report(f"LB SIGKILL: faults=1 sent={sum(c.sent for c in clients)} failed={failed}")
    for c in clients:
        report(f"   {c.summary()}")
    assert port_of(restarted) == port
    assert http_get(port)[0] == 200
    # Each client loses at most the request in flight on its open connection: new
    # connections wait in the endpoint socket's backlog while the LB restarts.
    for c in clients:
        assert c.failed <= 1, c.summary()
        assert c.bodies and c.bodies[-1][0] > time.time() - 2, c.summary()


def test_replica_that_never_becomes_ready(steady: Steady, tmp_path: Path) -> None:
    wrong_port = spec_text(name="wrongport", replicas=1, run="PORT=0 python3 server.py")
    wrong_port = wrong_port.replace("initial_delay_seconds: 10", "initial_delay_seconds: 1.5")
    steady.run("up", str(write(tmp_path, wrong_port, "wrong.yaml")))
    svc = steady.wait_for("wrongport", lambda s: s["status"] == "FAILED", what="FAILED")
    assert [r["status"] for r in svc["replicas"]] == ["FAILED_INITIAL_DELAY"]

    always_500 = spec_text(name="five", replicas=1, run=f"python3 {APPS / 'always_500.py'}")
    always_500 = always_500.replace("initial_delay_seconds: 10", "initial_delay_seconds: 1.5")
    steady.run("up", str(write(tmp_path, always_500, "five.yaml")))
    svc = steady.wait_for("five", lambda s: s["status"] == "FAILED", what="FAILED")
    assert [r["status"] for r in svc["replicas"]] == ["FAILED_INITIAL_DELAY"]
    events = steady.run("status", "five", "--events").stdout
    assert "answered 500" in events
    # Judged broken, and the decision not to relaunch is on record (the planner's
    # rule itself is tested on simulated time: test_runtime_simulated.py).
    assert "not relaunching" in events
    assert len(steady.service("five")["replicas"]) == 1


def _bad(steady: Steady, *args: str, needle: str) -> None:
    proc = steady.run(*args, check=False)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_bad_files_and_names(steady: Steady, tmp_path: Path) -> None:
    text = spec_text()
    _bad(
        steady,
        "up",
        str(
            write(
                tmp_path,
                text.replace(str(Path(text.split("workdir: ")[1].split()[0])), "/no/such/dir"),
                "nodir.yaml",
            )
        ),
        needle="workdir",
    )
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: x\nrun: \xff\xfe\n")
    _bad(steady, "up", str(binary), needle="binary.yaml")
    huge = tmp_path / "huge.yaml"
    huge.write_text("run: x\n" + "#" * (2 << 20))
    _bad(steady, "up", str(huge), needle="huge.yaml")
    _bad(steady, "up", str(write(tmp_path, "run: [", "syntax.yaml")), needle="line")
    _bad(steady, "update", "ghost", str(write(tmp_path, text, "ok.yaml")), needle="ghost")
    _bad(steady, "rollback", "ghost", needle="ghost")
    _bad(steady, "history", "ghost", needle="ghost")
    _bad(steady, "down", needle="--all")
    assert steady.status()["services"] == []


def test_state_is_private_and_token_guards_the_api(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(write(tmp_path, spec_text(replicas=1), "v1.yaml")), "--wait")
    home = steady.home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    for log in [home / "controller.log", *home.glob("services/*/replicas/*.log")]:
        assert stat.S_IMODE(log.stat().st_mode) == 0o600, log
    steady.run("down", "--all")
    steady.run("controller", "stop")

    token_steady = Steady(home)
    os.environ["STEADY_TOKEN"] = "s3cret"
    try:
        token_steady.run("controller", "start")
        info = json.loads((home / "controller.json").read_text())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(info["url"] + "/api/v1/services", timeout=5)
        assert refused.value.code == 401
        assert token_steady.status()["services"] == []
        token_steady.run("controller", "stop")
    finally:
        del os.environ["STEADY_TOKEN"]


def test_sqlite_survives_controller_sigkill_mid_write(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(write(tmp_path, spec_text(replicas=1), "v1.yaml")), "--wait")
    stop = threading.Event()
    made = [0]

    def burst() -> None:
        n = 1
        while not stop.is_set() and n < 200:
            n += 1
            text = spec_text(replicas=1).replace(
                "update_deadline_s: 60", f"update_deadline_s: {60 + n}"
            )
            proc = steady.run(
                "update", "web", str(write(tmp_path, text, f"b{n}.yaml")), check=False
            )
            made[0] += proc.returncode == 0

    thread = threading.Thread(target=burst, daemon=True)
    thread.start()
    time.sleep(2.0)
    info = json.loads(steady.run("controller", "status", "--json").stdout)
    os.kill(info["pid"], signal.SIGKILL)
    stop.set()
    thread.join(timeout=60)
    svc = steady.wait_for("web", lambda s: s["ready_replicas"] == 1, what="ready after restart")
    store = Store(steady.home / "state.db")
    try:
        assert store.integrity_ok()
        versions = [v.version for v in store.versions("web")]
        assert versions == list(range(1, len(versions) + 1))
        assert svc["version"] == versions[-1]
    finally:
        store.close()
    report(f"SQLite under SIGKILL: updates made={made[0]} versions={len(versions)} integrity=ok")


def test_down_interrupted_by_a_controller_crash_finishes(steady: Steady, tmp_path: Path) -> None:
    text = spec_text(replicas=2).replace(
        "graceful_shutdown_timeout_s: 3", "graceful_shutdown_timeout_s: 8"
    )
    text = text.replace("run: python3 server.py", "run: trap '' TERM; exec python3 server.py")
    steady.run("up", str(write(tmp_path, text, "v1.yaml")), "--wait")
    info = json.loads(steady.run("controller", "status", "--json").stdout)
    down = subprocess.Popen(
        [sys.executable, "-m", "steadyserve.cli", "down", "web", "--purge"],
        env=steady.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # the replicas ignore SIGTERM: the down is still waiting on them
    os.kill(info["pid"], signal.SIGKILL)
    down.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and steady.status()["services"]:
        time.sleep(0.2)
    assert steady.status()["services"] == []
    assert not (steady.home / "services" / "web").exists()
    report("controller SIGKILL during down: faults=1, the restarted controller finished it")
