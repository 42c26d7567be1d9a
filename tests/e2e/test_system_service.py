"""The controller as a system service: the shipped unit, run under a real supervisor.

``steady controller install-unit`` writes the unit; ``systemd-analyze verify``
checks it where systemd's tools exist. PID 1 here is not systemd, so its
``ExecStart`` runs under Debian's ``supervisor`` (supervisord in the foreground,
its own config in a temp dir, no system service): a SIGKILLed controller comes
back by itself and the service keeps serving meanwhile.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.steady import EXAMPLES, LoadClient, Steady, api_secret

STEP_S = 30.0


def _service(tmp: Path) -> Path:
    path = tmp / "web.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe: {{path: /health, initial_delay_seconds: 20, timeout_seconds: 2}}
          replicas: 2
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
        workdir: {EXAMPLES / "http_server"}
        run: python3 server.py
        """)
    )
    return path


def _unit(steady: Steady, tmp: Path) -> tuple[str, dict[str, str]]:
    path = tmp / "steady-controller.service"
    steady.run("controller", "install-unit", "--output", str(path))
    text = path.read_text()
    keys = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")
    assert keys["Restart"] == "always" and keys["User"] and keys["KillMode"] == "process"
    assert keys["Environment"] == f"STEADY_HOME={steady.home.resolve()}"
    steady.run("controller", "start")  # the home's secret exists: it is not in the unit
    assert api_secret(steady.home) not in text
    steady.run("controller", "stop")
    if shutil.which("systemd-analyze"):
        verified = subprocess.run(
            ["systemd-analyze", "verify", str(path)],
            capture_output=True,
            text=True,
            timeout=STEP_S,
            check=False,
        )
        assert verified.returncode == 0, verified.stderr
    return keys["ExecStart"], {"STEADY_HOME": str(steady.home.resolve())}


def _controller_pid(steady: Steady, other_than: int | None = None) -> int:
    deadline = time.monotonic() + STEP_S
    while time.monotonic() < deadline:
        out = steady.run("controller", "status", "--json", check=False)
        if out.returncode == 0:
            pid = int(json.loads(out.stdout)["pid"])
            if pid != other_than:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no controller (other than {other_than}) answered: {out.stderr}")


def test_run_refuses_a_home_another_controller_holds(steady: Steady) -> None:
    """Exit 1 with one line, not 0: under Restart=always an exit 0 would loop silently."""
    steady.run("controller", "start")
    out = steady.run("controller", "run", check=False, timeout=STEP_S)
    assert out.returncode == 1, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "another controller" in lines[0], out.stderr


@pytest.mark.skipif(shutil.which("supervisord") is None, reason="apt-get install supervisor")
def test_supervisor_restarts_a_killed_controller_and_the_service_keeps_serving(
    steady: Steady, tmp_path: Path
) -> None:
    command, env = _unit(steady, tmp_path)
    conf = tmp_path / "supervisord.conf"
    environment = ",".join(f'{k}="{v}"' for k, v in env.items())
    conf.write_text(
        textwrap.dedent(f"""\
        [supervisord]
        nodaemon=true
        user=root
        logfile={tmp_path}/supervisord.log
        pidfile={tmp_path}/supervisord.pid
        childlogdir={tmp_path}
        [unix_http_server]
        file={tmp_path}/supervisor.sock
        [rpcinterface:supervisor]
        supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
        [supervisorctl]
        serverurl=unix://{tmp_path}/supervisor.sock
        [program:steady]
        command={" ".join(shlex.quote(w) for w in shlex.split(command))}
        environment={environment}
        autorestart=true
        startsecs=1
        stopsignal=TERM
        stopwaitsecs=30
        redirect_stderr=true
        stdout_logfile={tmp_path}/controller.out
        """)
    )
    supervisor = subprocess.Popen(
        ["supervisord", "-c", str(conf)],
        env=steady.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        first = _controller_pid(steady)
        assert psutil.Process(first).ppid() == supervisor.pid  # supervisor's, not a CLI's
        steady.run("up", str(_service(tmp_path)), "--wait", "--timeout", "60")
        svc = steady.service("web")
        replicas = {r["pid"] for r in svc["replicas"]}
        port = int(svc["endpoint"].rsplit(":", 1)[1])
        load = LoadClient(port, max_seconds=60).start()
        try:
            os.kill(first, signal.SIGKILL)
            second = _controller_pid(steady, other_than=first)
            svc = steady.wait_for("web", lambda s: s["status"] == "READY", what="READY again")
        finally:
            load.stop()
        assert psutil.Process(second).ppid() == supervisor.pid
        assert load.sent > 0 and load.failed == 0, load.summary()
        assert {r["pid"] for r in svc["replicas"]} == replicas  # adopted, not restarted

        # SIGTERM (supervisorctl/systemctl stop) ends the controller alone, exit 0.
        ctl = ["supervisorctl", "-c", str(conf)]
        stopped = subprocess.run(
            [*ctl, "stop", "steady"], capture_output=True, text=True, timeout=STEP_S
        )
        assert "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert not psutil.pid_exists(second) or psutil.Process(second).status() == "zombie"
        assert all(psutil.pid_exists(pid) for pid in replicas)
        assert "exit status 0" in (tmp_path / "supervisord.log").read_text()
    finally:
        supervisor.terminate()
        try:
            supervisor.wait(timeout=STEP_S)
        except subprocess.TimeoutExpired:
            supervisor.kill()
            supervisor.wait(timeout=STEP_S)
