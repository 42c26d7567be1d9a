"""Files as people keep them, through the real CLI, in one home for the module.

Service files live beside the code they run (``one.yaml``, ``two.yaml`` and
``server.py`` in one folder); files without a name come and go in one folder
(SkyPilot's ``examples/serve/``); and the home confines every port it takes to
``STEADY_PORTS``. The home is shared by the tests here (one controller), so each
test takes its services down at its end; the port check runs while services of
the earlier tests' kind run beside its own.
"""

from __future__ import annotations

import http.client
import json
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from steadyserve.port_range import parse
from tests.helpers.steady import EXAMPLES, Steady, processes_of_home

PORTS = "31500-31547"
"""Below the kernel's ephemeral range and apart from the usual endpoints (30001 up)
and replica ports (20000-29999) other tests take: 12 endpoint ports, 24 for
replicas, 12 for the controller and the load balancers' metrics."""
RANGE = parse(PORTS)


@pytest.fixture(scope="module")
def steady() -> Iterator[Steady]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        cli = Steady(home, {"STEADY_PORTS": PORTS})
        try:
            yield cli
        finally:
            cli.run("down", "--all", "-y", check=False, timeout=120)
            cli.run("controller", "stop", check=False, timeout=60)
            left = processes_of_home(home)
            for proc in left:
                proc.kill()
            assert not left, f"orphan processes: {[p.cmdline() for p in left]}"


def service_file(folder: Path, filename: str, *, message: str = "one", **extra: Any) -> Path:
    """A service file beside ``server.py`` (the example HTTP server) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "server.py").write_text((EXAMPLES / "http_server" / "server.py").read_text())
    name = f"name: {extra['name']}\n" if "name" in extra else ""
    path = folder / filename
    path.write_text(
        name
        + textwrap.dedent(f"""\
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 20
          replicas: {extra.get("replicas", 2)}
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 2
          user_config:
            message: "{message}"
          reconfigure_path: /-/reconfigure
        workdir: .
        run: python3 server.py
        """)
    )
    return path


def pids(svc: dict[str, Any]) -> list[int]:
    return sorted(r["pid"] for r in svc["replicas"] if r["status"] == "READY")


def plan(steady: Steady, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(steady.run("update", *args, "--dry-run", "--json").stdout)
    return out


def test_an_update_between_files_of_one_folder_keeps_its_replicas(
    steady: Steady, tmp_path: Path
) -> None:
    folder = tmp_path / "web"
    one = service_file(folder, "one.yaml", name="web", message="one")
    two = service_file(folder, "two.yaml", name="web", message="two")
    (folder / "config.yaml").write_text("greeting: hello\n")  # read by the replica
    up = steady.run("up", str(one), "--wait", "--timeout", "90")
    assert "CONTROLLER_INIT, 2/2" not in up.stdout, up.stdout  # a state its count belies
    before = pids(steady.service("web"))

    change = plan(steady, "web", str(two))
    assert [c["path"] for c in change["changes"]] == ["service.user_config"], change
    assert change["mode"] == "in_place"
    steady.run("update", "web", str(two), "--wait", "--timeout", "90")
    after = steady.service("web")
    assert after["version"] == 2 and pids(after) == before

    # Back to the first file, a service file edited meanwhile: still nothing to restart.
    two.write_text(two.read_text().replace("replicas: 2", "replicas: 2  # edited"))
    back = plan(steady, "web", str(one))
    assert [c["path"] for c in back["changes"]] == ["service.user_config"], back

    # A file the replica reads is code: it restarts, and the plan names it alone.
    (folder / "config.yaml").write_text("greeting: bonjour\n")
    code = plan(steady, "web", str(one))
    workdir = next(c for c in code["changes"] if c["path"] == "workdir")
    assert workdir["kind"] == "restart"
    assert workdir["files"]["changed"] == ["config.yaml"]
    assert workdir["files"]["added"] == workdir["files"]["removed"] == []
    steady.run("down", "web")


def test_an_unrelated_file_never_becomes_a_version_of_a_downed_service(
    steady: Steady, tmp_path: Path
) -> None:
    folder = tmp_path / "serve"  # SkyPilot's examples/serve/: many files, no name
    first = service_file(folder, "first.yaml", replicas=0)
    other = service_file(folder, "other.yaml", replicas=0)
    steady.run("up", str(first))
    assert steady.service("serve")["version"] == 1

    second = steady.run("up", str(other), "--json")
    taken = json.loads(second.stdout)["name"]
    assert taken.startswith("sky-service-") and "name: serve is taken" in second.stderr

    steady.run("down", "serve", taken)
    third = json.loads(steady.run("up", str(other), "--json").stdout)["name"]
    assert third.startswith("sky-service-") and third != "serve"
    history = json.loads(steady.run("history", "serve", "--json").stdout)
    assert history["down"] and [v["version"] for v in history["versions"]] == [1]

    # The name itself, asked for: it starts again at version 1, as in SkyServe.
    again = steady.run("up", str(other), "-n", "serve", "--json")
    assert "its history (version 1) is forgotten" in again.stderr
    versions = json.loads(steady.run("history", "serve", "--json").stdout)["versions"]
    assert [(v["version"], v["outcome"]) for v in versions] == [(1, "active")]

    # steady serve up names an unnamed file as SkyServe does.
    sky = json.loads(steady.run("serve", "up", str(first), "--json").stdout)["name"]
    assert sky.startswith("sky-service-")
    steady.run("down", "serve", third, sky)


def listening_ports(home: Path) -> dict[int, str]:
    """Every TCP port a process of the home listens on, with what listens."""
    found: dict[int, str] = {}
    for proc in processes_of_home(home):
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found[conn.laddr.port] = " ".join(proc.cmdline()[:4])
        except psutil.Error:
            continue
    return found


def test_a_port_range_holds_every_port_of_a_three_replica_service(
    steady: Steady, tmp_path: Path
) -> None:
    three = service_file(tmp_path / "three", "three.yaml", name="three", replicas=3)
    up = steady.run("up", str(three), "--wait", "--timeout", "90")
    assert "warning" not in up.stderr, up.stderr  # the file set no port: nothing to warn
    svc = steady.service("three")
    assert len(pids(svc)) == 3
    assert int(svc["endpoint"].rsplit(":", 1)[1]) in RANGE.endpoints
    assert all(r["port"] in RANGE.replicas for r in svc["replicas"]), svc["replicas"]

    # A second service gets the next port without a word: the first is this home's.
    idle = service_file(tmp_path / "idle", "idle.yaml", name="idle", replicas=0)
    second = steady.run("up", str(idle), "--json")
    assert "warning" not in second.stderr and json.loads(second.stdout)["notice"] is None
    assert int(json.loads(second.stdout)["endpoint"].rsplit(":", 1)[1]) in RANGE.endpoints

    # An unchanged file's endpoint, from the command line.
    named = RANGE.endpoints[-1]
    again = service_file(tmp_path / "again", "again.yaml", name="again", replicas=1)
    out = json.loads(steady.run("up", str(again), "--port", str(named), "--json").stdout)
    assert out["endpoint"] == f"127.0.0.1:{named}" and out["notice"] is None
    steady.wait_for("again", lambda s: s["ready_replicas"] == 1, what="again ready")

    # The controller and the three load balancers' metrics listeners, once all are up.
    deadline = time.monotonic() + 20
    ports = listening_ports(steady.home)
    while len([p for p in ports if p in RANGE.singles]) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
        ports = listening_ports(steady.home)
    assert len([p for p in ports if p in RANGE.singles]) == 4, ports
    outside = {port: what for port, what in ports.items() if port not in RANGE}
    assert not outside, f"listening outside {PORTS}: {outside}"
    steady.run("down", "three", "again", "idle")


def test_auth_key_is_asked_of_every_request(steady: Steady, tmp_path: Path) -> None:
    """SkyServe's service.auth_key (SkyPilot's examples/serve/auth-server.yaml): the
    load balancer answers 401 without ``Authorization: Bearer KEY``."""
    key = "sky-authkey-3d2105b9"
    path = service_file(tmp_path / "guarded", "guarded.yaml", name="guarded", replicas=1)
    path.write_text(path.read_text().replace("service:\n", f"service:\n  auth_key: {key}\n", 1))
    steady.run("up", str(path), "--wait", "--timeout", "90")
    port = int(steady.service("guarded")["endpoint"].rsplit(":", 1)[1])

    def get(headers: dict[str, str]) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/", headers=headers)
            return conn.getresponse().status
        finally:
            conn.close()

    assert get({}) == 401
    assert get({"Authorization": "Bearer wrong"}) == 401
    assert get({"Authorization": f"Bearer {key}"}) == 200
    other = path.read_text().replace(key, "another-key")
    path.write_text(other)
    refused = steady.run("update", "guarded", str(path), check=False)
    assert refused.returncode == 2 and "service.auth_key: " in refused.stderr
    assert key not in refused.stderr and "another-key" not in refused.stderr
    steady.run("down", "guarded")
