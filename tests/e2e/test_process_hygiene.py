"""What a replica's processes get and what becomes of them: a clean environment,
a control port only the controller can use, and a process tree that ``down``
stops entirely and a restarted controller's orphan sweep leaves alone."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import shutil
import signal
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from steadyserve.backends.base import LaunchRequest
from steadyserve.backends.cgroups import PREFIX, Cgroups
from steadyserve.backends.local import LocalBackend, LocalProcess
from steadyserve.controller.probes import new_probe_session
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.states import ReplicaStatus, ServiceStatus, VersionOutcome
from steadyserve.home.paths import Home
from steadyserve.spec import parse_service
from steadyserve.store import ServiceRow, Store, VersionRow
from steadyserve.wire import replica_contract as contract
from tests.helpers.steady import EXAMPLES, Steady, processes_of_home

TEXT_ML = EXAMPLES / "text_ml"
HTTP_SERVER = "exec python3 -m http.server $PORT --bind 127.0.0.1"


def command_service(tmp: Path, name: str, run: str, envs: dict[str, str]) -> Path:
    path = tmp / f"{name}.yaml"
    env_lines = "".join(f"\n  {k}: {json.dumps(v)}" for k, v in envs.items())
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe:
            path: /
            initial_delay_seconds: 20
            timeout_seconds: 2
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
        run: {json.dumps(run)}
        """)
        + (f"envs:{env_lines}\n" if envs else "")
    )
    return path


def wait_for_file(path: Path, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_setsid_child_stopped_by_down_and_spared_by_the_reaper(
    steady: Steady, tmp_path: Path
) -> None:
    child_pid_file = tmp_path / "child.pid"
    run = "setsid sh -c 'echo $$ > \"$CHILD_PID_FILE\"; exec sleep 300' & " + HTTP_SERVER
    spec = command_service(tmp_path, "leaver", run, {"CHILD_PID_FILE": str(child_pid_file)})
    steady.run("up", str(spec), "--wait", "--timeout", "60")
    child = int(wait_for_file(child_pid_file))
    replica = steady.service("leaver")["replicas"][0]
    assert os.getsid(child) != os.getsid(replica["pid"])  # it really left the session

    # A restarted controller sweeps orphans: the live replica's child is not one.
    steady.run("controller", "stop")
    steady.run("controller", "start")
    svc = steady.wait_for("leaver", lambda s: s["status"] == "READY", what="re-adopted")
    assert alive(child), "the orphan sweep killed a live replica's child"
    assert [r["pid"] for r in svc["replicas"]] == [replica["pid"]]

    steady.run("down", "leaver")
    deadline = time.monotonic() + 20
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "steady down left the replica's setsid child running"


CGROUPS = Cgroups.of_machine()
needs_cgroups = pytest.mark.skipif(
    not CGROUPS.hierarchies, reason="no writable cgroups here (tracking falls back to the tag)"
)


def cgroups_of_home(home: Path) -> list[Path]:
    """The replica cgroups left under the test's own cgroup for ``home``."""
    hid = contract.home_id(home.resolve())
    return [
        p for h in CGROUPS.hierarchies for p in (h.base / f"{PREFIX}{hid}").glob("*") if p.is_dir()
    ]


@needs_cgroups
def test_a_child_that_clears_its_environment_and_session_is_stopped_by_down(
    steady: Steady, tmp_path: Path
) -> None:
    """``env -i setsid``: no tag, no process group, no session of the replica's;
    only its cgroup still holds it."""
    child_pid_file = tmp_path / "child.pid"
    setsid = shutil.which("setsid")
    assert setsid is not None
    run = (
        f"env -i {setsid} /bin/sh -c 'echo $$ > {child_pid_file}; exec /bin/sleep 300' & "
        + HTTP_SERVER
    )
    spec = command_service(tmp_path, "hider", run, {})
    steady.run("up", str(spec), "--wait", "--timeout", "60")
    child = int(wait_for_file(child_pid_file))
    try:
        replica = steady.service("hider")["replicas"][0]
        assert os.getsid(child) != os.getsid(replica["pid"])
        assert contract.REPLICA_TAG not in psutil.Process(child).environ()
        # A restarted controller's orphan sweep knows the child by its cgroup: spared.
        steady.run("controller", "stop")
        steady.run("controller", "start")
        steady.wait_for("hider", lambda s: s["status"] == "READY", what="re-adopted")
        assert alive(child), "the orphan sweep killed a live replica's child"
        steady.run("down", "hider")
        deadline = time.monotonic() + 20
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "steady down left the replica's env -i setsid child running"
        assert cgroups_of_home(steady.home) == []
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


EATER = """import http.server, os


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/eat":
            hoard = b"x" * (400 << 20)  # 400 MB, past the 0.1 GB limit
            self.send_response(500 + len(hoard) % 2)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


@needs_cgroups
def test_a_replica_past_its_memory_limit_fails_out_of_memory_and_the_other_serves(
    steady: Steady, tmp_path: Path
) -> None:
    if not CGROUPS.has_memory:
        pytest.skip("no memory cgroup here")
    (tmp_path / "eater.py").write_text(EATER)
    path = tmp_path / "eater.yaml"
    path.write_text(
        textwrap.dedent(f"""        name: eater
        resources:
          memory: 0.1
        service:
          readiness_probe: /
          replicas: 2
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
        run: "cd {tmp_path} && exec python3 eater.py"
        """)
    )
    steady.run("up", str(path), "--wait", "--timeout", "60")
    svc = steady.service("eater")
    victim, other = sorted(svc["replicas"], key=lambda r: r["id"])
    with contextlib.suppress(OSError, http.client.HTTPException):
        conn = http.client.HTTPConnection("127.0.0.1", victim["port"], timeout=10)
        conn.request("GET", "/eat")
        conn.getresponse().read()
    svc = steady.wait_for(
        "eater",
        lambda s: any(r["id"] == victim["id"] and r["status"] == "FAILED" for r in s["replicas"]),
        what="the replica past its limit to fail",
    )
    (failed,) = [r for r in svc["replicas"] if r["id"] == victim["id"]]
    assert failed["reason"].startswith("out of memory: killed by the kernel"), failed
    assert "0.1 GB" in failed["reason"]
    events = steady.run("status", "eater", "--events").stdout
    assert "out of memory" in events
    assert any(r["id"] == other["id"] and r["status"] == "READY" for r in svc["replicas"])
    port = int(str(svc["endpoint"]).rsplit(":", 1)[1])
    for _ in range(5):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/")
        assert conn.getresponse().status == 200
        conn.close()
    steady.run("down", "eater")
    assert cgroups_of_home(steady.home) == []


def test_reaper_stops_only_what_the_state_proves_its_own(steady: Steady, tmp_path: Path) -> None:
    """A tagged process of a replica the state recorded and no longer runs is an
    orphan: stopped. One of a replica the state never recorded (a state restored
    from a backup, begun afresh) is a stray: reported, left running."""
    spec = command_service(tmp_path, "keeper", HTTP_SERVER, {})
    steady.run("up", str(spec), "--wait", "--timeout", "60")
    first = steady.service("keeper")["replicas"][0]
    os.kill(first["pid"], signal.SIGKILL)  # replaced: its id stays recorded, not live
    steady.wait_for(
        "keeper",
        lambda s: [r["id"] for r in s["replicas"] if r["status"] == "READY"] == [first["id"] + 1],
        what="the replacement READY",
    )
    steady.run("controller", "stop")
    home = steady.home.resolve()
    strays = {
        number: psutil.Popen(
            ["sleep", "300"],
            env={
                "PATH": os.environ["PATH"],
                contract.REPLICA_TAG: contract.replica_tag(home, "keeper", number),
            },
            start_new_session=True,
        )
        for number in (first["id"], 999)  # recorded and gone; never recorded
    }
    try:
        # Until it has exec'd, a child's /proc environ is still this process's.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
            contract.REPLICA_TAG in p.environ() for p in strays.values()
        ):
            time.sleep(0.02)
        seen = [p.pid for p in processes_of_home(steady.home)]
        assert all(p.pid in seen for p in strays.values())  # the leak check sees them
        steady.run("controller", "start")
        orphan = strays[first["id"]]
        deadline = time.monotonic() + 20
        while orphan.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphan.poll() is not None, "the orphan sweep left a proven orphan running"
        assert strays[999].poll() is None, "the orphan sweep stopped a process it cannot prove"
        said = f"process {strays[999].pid} (replica 999 of service keeper) runs but"
        assert said in (steady.home / "controller.log").read_text()
        steady.wait_for("keeper", lambda s: s["status"] == "READY", what="re-adopted")
        assert said in steady.run("status", "keeper", "--events").stdout
        # Reporting it did not make the state "know" it: the next start spares it too.
        steady.run("controller", "stop")
        steady.run("controller", "start")
        assert strays[999].poll() is None, "a reported stray was stopped at the next start"
    finally:
        for proc in strays.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_replica_environment_is_clean(
    monkeypatch: pytest.MonkeyPatch, steady: Steady, tmp_path: Path
) -> None:
    # monkeypatch first: its undo runs after ``steady``'s teardown, which needs the token.
    monkeypatch.setenv("STEADY_TOKEN", "controller-only-token")
    monkeypatch.setenv("PROCHYG_CONTROLLER_ONLY", "1")
    dump = tmp_path / "env.json"
    run = (
        "python3 -c 'import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], \"w\"))'"
        ' "$ENV_DUMP"; ' + HTTP_SERVER
    )
    spec = command_service(tmp_path, "clean", run, {"ENV_DUMP": str(dump), "MY_SETTING": "x"})
    steady.run("up", str(spec), "--wait", "--timeout", "60")
    env = json.loads(wait_for_file(dump))
    replica = steady.service("clean")["replicas"][0]
    assert "STEADY_TOKEN" not in env
    assert "PROCHYG_CONTROLLER_ONLY" not in env
    assert "STEADY_HOME" not in env
    assert env["MY_SETTING"] == "x" and env["PATH"] == os.environ["PATH"]
    assert env["PORT"] == str(replica["port"]) and env["STEADY_REPLICA_ID"] == str(replica["id"])
    documented = {
        "PORT",
        "STEADY_REPLICA_ID",
        "SKYPILOT_SERVE_REPLICA_ID",
        "STEADY_SERVICE_NAME",
        "STEADY_SERVICE_VERSION",
        "STEADY_REPLICA_TAG",
        "HOST",
        "PYTHONUNBUFFERED",  # 1 unless envs set it (docs/design.md)
        "ENV_DUMP",
        "MY_SETTING",
    }
    extra = {
        k
        for k in env
        if k not in documented and k not in contract.BASE_ENV and not k.startswith("LC_")
    }
    # bash itself adds a few (PWD, SHLVL, _, OLDPWD).
    assert extra <= {"PWD", "SHLVL", "_", "OLDPWD"}, extra
    steady.run("down", "clean")


def control_request(
    port: int, path: str, secret: str | None, body: object = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {contract.CONTROL_SECRET_HEADER: secret} if secret else {}
        data = None if body is None else json.dumps(body).encode()
        conn.request("GET" if data is None else "POST", path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def python_service(tmp: Path, language: str) -> Path:
    """text_ml's Translator, whose module records the environment it was imported
    in, and a setup that records its own."""
    app = tmp / "text_ml"
    if not app.exists():
        shutil.copytree(TEXT_ML, app)
        with open(app / "text_ml.py", "a") as module:
            module.write(
                "\nimport json as _json, os as _os\n"
                "if 'IMPORT_ENV_DUMP' in _os.environ:  # not when `steady up` describes it\n"
                "    with open(_os.environ['IMPORT_ENV_DUMP'], 'w') as _out:\n"
                "        _json.dump(dict(_os.environ), _out)\n"
            )
    path = tmp / "py.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: py
        import_path: text_ml:Translator
        workdir: {app}
        setup: env > {tmp / "setup.env"}
        envs:
          IMPORT_ENV_DUMP: {tmp / "import.env"}
        service:
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_timeout_s: 3.5
          graceful_shutdown_wait_loop_s: 0.7
          user_config:
            language: {language}
        """)
    )
    return path


def test_control_port_needs_the_secret_and_gets_the_files_drain_settings(
    steady: Steady, tmp_path: Path
) -> None:
    steady.run("up", str(python_service(tmp_path, "french")), "--wait", "--timeout", "60")
    replica = steady.service("py")["replicas"][0]
    runner = psutil.Process(replica["pid"])
    control_port = next(
        c.laddr.port
        for c in runner.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port != replica["port"]
    )
    status, _ = control_request(control_port, "/-/healthz", None)
    assert status == 401
    status, _ = control_request(control_port, "/-/healthz", "a-guess")
    assert status == 401
    # Neither setup nor the user's module sees the secret (same-user /proc still
    # shows the runner's initial environment, which is where the test reads it).
    assert contract.CONTROL_SECRET not in (tmp_path / "setup.env").read_text()
    assert contract.CONTROL_SECRET not in json.loads(wait_for_file(tmp_path / "import.env"))
    secret = runner.environ()[contract.CONTROL_SECRET]
    status, body = control_request(control_port, "/-/info", secret)
    assert status == 200
    info = json.loads(body)
    assert info["graceful_shutdown_timeout_s"] == 3.5
    assert info["graceful_shutdown_wait_loop_s"] == 0.7

    # After a controller restart, health checks and reconfigure still carry the secret.
    steady.run("controller", "stop")
    steady.run("controller", "start")
    steady.wait_for("py", lambda s: s["status"] == "READY", what="re-adopted")
    path = python_service(tmp_path, "german")
    out = steady.run("update", "py", str(path), "--wait", "--timeout", "60")
    assert "in place" in out.stdout, out.stdout
    svc = steady.service("py")
    assert svc["version"] == 2 and svc["status"] == "READY"
    assert [r["pid"] for r in svc["replicas"]] == [replica["pid"]]
    port = int(str(svc["endpoint"]).rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/?text=hello")
    assert json.loads(conn.getresponse().read())["language"] == "german"
    conn.close()
    steady.run("down", "py")


def test_nul_byte_in_an_env_value_is_refused(steady: Steady, tmp_path: Path) -> None:
    path = tmp_path / "nul.yaml"
    path.write_text(f'name: nul\nrun: "{HTTP_SERVER}"\nenvs:\n  GREETING: "hi\\0there"\n')
    proc = steady.run("up", str(path), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "envs.GREETING" in lines[0] and "NUL" in lines[0], lines


class _NoRoomBackend(LocalBackend):
    """The local backend with a launch that fails in a way nothing validates (a
    stand-in for any unforeseen error between preparing and starting)."""

    async def launch(self, request: LaunchRequest) -> LocalProcess:
        raise RuntimeError("no room for\nthis replica")


def test_any_launch_exception_fails_the_replica_with_an_event(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    spec = parse_service({"name": "boom", "run": "true"}, base_dir=tmp_path)
    home.version_workdir("boom", 1).mkdir(parents=True)
    store = Store(home.db_path)
    now = time.time()
    row = ServiceRow(
        name="boom", status=ServiceStatus.CONTROLLER_INIT, version=1, created_at=now, port=1
    )
    version = VersionRow(
        "boom", 1, now, spec.spec_json(), "run: true\n", outcome=VersionOutcome.ACTIVE
    )
    store.add_service(row, version)

    async def scenario() -> str:
        async with new_probe_session() as session:
            runtime = ServiceRuntime(home, store, _NoRoomBackend(home), session, "e", row)
            runtime.launch(1)
            (replica,) = runtime.replicas.values()
            for _ in range(200):
                if replica.status not in ("PENDING", "PROVISIONING"):
                    break
                await asyncio.sleep(0.02)
            return replica.status

    try:
        assert asyncio.run(scenario()) == ReplicaStatus.FAILED_PROVISION.value
        reasons = [e.reason for e in store.events("boom") if e.to_status == "FAILED_PROVISION"]
        assert reasons == ["RuntimeError: no room for this replica"]
    finally:
        store.close()


def test_a_failed_replica_whose_stop_was_cut_short_is_stopped_after_a_restart(
    steady: Steady, tmp_path: Path
) -> None:
    """The controller dies while stopping a FAILED replica (one that ignores SIGTERM):
    the next controller finishes the stop instead of leaving the process running."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "ready").write_text("ok")
    path = tmp_path / "stubborn.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: stubborn
        service:
          readiness_probe: /ready
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_timeout_s: 10
        run: "trap '' TERM; cd {site} && {HTTP_SERVER}"
        """)
    )
    steady.run("up", str(path), "--wait", "--timeout", "60")
    pid = steady.service("stubborn")["replicas"][0]["pid"]
    (site / "ready").unlink()  # probes fail: FAILED_PROBING, then a stop SIGTERM cannot end
    steady.wait_for(
        "stubborn",
        lambda s: any(r["id"] == 1 and r["status"] == "FAILED_PROBING" for r in s["replicas"]),
        what="replica 1 to fail its probes",
    )
    info = json.loads(steady.run("controller", "status", "--json").stdout)
    os.kill(info["pid"], signal.SIGKILL)
    assert alive(pid), "the stop finished before the controller died: nothing left to test"
    (site / "ready").write_text("ok")
    steady.run("controller", "start")
    deadline = time.monotonic() + 40
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), "the restarted controller left a FAILED replica's process running"


def test_the_home_is_owner_only_and_replicas_keep_the_users_umask(
    steady: Steady, tmp_path: Path
) -> None:
    """Everything the controller creates in the home is 0700/0600, whatever the umask
    of the shell that started it; the sealed copies of a workdir are read-only (0444,
    0555 when executable) and only reachable through the 0700 home. A replica's own
    files get the user's umask: SteadyServe's privacy is not imposed on user code."""
    made = tmp_path / "made-by-replica"
    run = f"touch {made} && " + HTTP_SERVER
    spec = command_service(tmp_path, "modes", run, {})
    steady.run("up", str(spec), "--wait", "--timeout", "60")
    user_umask = os.umask(0)
    os.umask(user_umask)
    assert made.stat().st_mode & 0o777 == 0o666 & ~user_umask
    loose = []
    for path in [steady.home, *steady.home.rglob("*")]:
        if path.is_socket() or path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o777
        sealed = "objects" in path.parts or "workdir" in path.parts
        if path.is_dir():
            ok = mode == 0o700 or (sealed and mode in (0o700, 0o555, 0o500))
        else:
            ok = mode == 0o600 or (sealed and mode in (0o444, 0o555))
        if not ok:
            loose.append(f"{oct(mode)} {path.relative_to(steady.home)}")
    assert not loose, loose
    steady.run("down", "modes")


def test_a_chatty_replica_log_is_rotated_under_its_cap_and_reads_as_one(
    steady: Steady, tmp_path: Path
) -> None:
    """1 MB a second into a log capped at 500 KB: copies appear and stay at most
    STEADY_REPLICA_LOG_BACKUPS, the replica keeps writing to its own file (the
    controller is not in its output path), and ``steady logs`` reads across."""
    chatty = Steady(
        steady.home,
        {"STEADY_REPLICA_LOG_MAX_BYTES": "500000", "STEADY_REPLICA_LOG_BACKUPS": "2"},
    )
    writer = "(while true; do head -c 1000000 /dev/zero | tr '\\0' x; echo; sleep 1; done) & "
    spec = command_service(tmp_path, "chatty", writer + HTTP_SERVER, {})
    chatty.run("up", str(spec), "--wait", "--timeout", "60")
    replica = chatty.service("chatty")["replicas"][0]
    log = Home(steady.home).replica_log("chatty", replica["id"])
    deadline = time.monotonic() + 40
    while not log.with_name(f"{log.name}.2").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert log.with_name(f"{log.name}.2").exists(), "the log was not rotated twice"
    assert not log.with_name(f"{log.name}.3").exists()
    # The replica's stdout is still its own log file, appended at the truncated end.
    assert os.readlink(f"/proc/{replica['pid']}/fd/1") == str(log)
    assert log.stat().st_size < 4_000_000
    out = chatty.run("logs", "chatty", str(replica["id"])).stdout  # the copies, then the file
    assert out.count("x" * 1000) >= 2
    assert chatty.service("chatty")["replicas"][0]["pid"] == replica["pid"]
    chatty.run("down", "chatty")
