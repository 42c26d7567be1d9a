"""Network isolation (``service.isolation``, docs/isolation.md), as a SkyServe user
meets it: the http_server example's shape (``resources.ports: 8080``, ``python3
server.py --port 8080``) with 2 and then 4 replicas, each in its own network
namespace, every one serving, through a rolling and a blue-green update under load
with no failed request. A replica cannot reach the controller, can reach a package
index, survives a controller SIGKILL, and nothing of it is left after ``down --all``.

One home for the module (tests run in file order); needs root (CI runs as root).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from steadyserve.backends import netns
from tests.conftest import _steady_in
from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady, http_get

APP = Path(__file__).parent / "apps"
pytestmark = pytest.mark.skipif(
    netns.unavailable() is not None, reason=f"no network isolation: {netns.unavailable()}"
)


def spec(
    tmp: Path, name: str, *, replicas: int, message: str, extra: str = "", config: int = 1
) -> Path:
    workdir = tmp / "http_server"
    if not workdir.exists():
        workdir.mkdir()
        (workdir / "server.py").write_text((APP / "fixed_port_server.py").read_text())
    path = tmp / f"{name}-{message}.yaml"
    text = textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 20
            timeout_seconds: 2
          replicas: {replicas}
          update_deadline_s: 60
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
          reconfigure_path: /-/reconfigure
        """)
    text += f"  user_config: {{n: {config}}}\n"
    text += "".join(f"  {line}\n" for line in extra.splitlines())
    text += textwrap.dedent(f"""\
        resources:
          ports: 8080
        workdir: {workdir}
        envs:
          MESSAGE: {message}
        run: python3 server.py --port 8080
        """)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def web() -> Iterator[tuple[Steady, Path]]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        for cli in _steady_in(Steady(home), home):
            yield cli, Path(tmp)
        assert netns.of_home(home.resolve()) == [], "namespaces left behind"


def port_of(svc: dict[str, Any]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def ready(svc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in svc["replicas"] if r["status"] == "READY"]


def answers(client: LoadClient, since: float = 0.0) -> list[dict[str, str]]:
    return [json.loads(body) for t, body in client.bodies if t > since]


def get_json(port: int, path: str, timeout: float = 10.0) -> Any:
    status, body = http_get(port, path, timeout=timeout)
    assert status == 200, body
    return json.loads(body)


def test_http_server_shape_runs_unchanged_through_updates(web: tuple[Steady, Path]) -> None:
    steady, tmp = web
    steady.run("up", str(spec(tmp, "web", replicas=2, message="v1")), "--wait", "--timeout", "60")
    svc = steady.service("web")
    assert [r["port"] for r in ready(svc)] == [8080, 8080]
    assert len(netns.of_home(steady.home.resolve())) == 2
    client = LoadClient(port_of(svc), max_seconds=80).start()
    deadline = time.monotonic() + 10
    while {a["replica"] for a in answers(client)} != {"1", "2"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {a["replica"] for a in answers(client)} == {"1", "2"}, "not every replica serves"
    rolling = spec(tmp, "web", replicas=4, message="v2")
    steady.run("update", "web", str(rolling), "--wait", "--timeout", "60")
    blue_green = spec(tmp, "web", replicas=4, message="v3", extra="update_mode: blue_green")
    steady.run("update", "web", str(blue_green), "--wait", "--timeout", "60")
    marker = time.time()
    deadline = time.monotonic() + 10
    while len({a["replica"] for a in answers(client, marker)}) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.stop()
    report(f"isolated fixed-port replicas, rolling then blue-green: {client.summary()}")
    assert client.sent > 50 and client.failed == 0, client.summary()
    late = answers(client, marker)
    assert {a["message"] for a in late} == {"v3"} and len({a["replica"] for a in late}) == 4
    assert all(a["config"] == {"n": 1} for a in answers(client))  # delivered in, before serving
    svc = steady.service("web")
    assert len(ready(svc)) == 4 and {r["port"] for r in ready(svc)} == {8080}
    # The old versions' namespaces go as their replicas finish stopping, which an
    # update's success does not wait for (as a Deployment's rollout does not wait
    # for its old pods' termination): bounded, 10 s.
    deadline = time.monotonic() + 10
    while len(netns.of_home(steady.home.resolve())) > 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(netns.of_home(steady.home.resolve())) == 4


def test_user_config_reaches_isolated_replicas_in_place(web: tuple[Steady, Path]) -> None:
    steady, tmp = web
    pids = sorted(r["pid"] for r in ready(steady.service("web")))
    v4 = spec(tmp, "web", replicas=4, message="v3", extra="update_mode: blue_green", config=2)
    out = steady.run("update", "web", str(v4), "--wait", "--timeout", "30").stdout
    assert "in place" in out
    port = port_of(steady.service("web"))
    seen = [get_json(port, "/") for _ in range(12)]
    assert all(a["config"] == {"n": 2} for a in seen), seen
    assert sorted(r["pid"] for r in ready(steady.service("web"))) == pids


def controller(home: Path) -> tuple[int, int]:
    info = json.loads((home / "controller.json").read_text())
    return int(info["pid"]), int(info["url"].rsplit(":", 1)[1])


def test_a_replica_cannot_reach_the_controller(web: tuple[Steady, Path]) -> None:
    steady, _ = web
    _, api_port = controller(steady.home)
    status, _ = http_get(api_port, "/api/v1/health")  # there, from the host
    assert status in (200, 401)
    found = get_json(port_of(steady.service("web")), f"/reach?port={api_port}")
    assert set(found) == {"127.0.0.1", "10.0.2.2"}
    assert all(v.startswith("no: ") for v in found.values()), found


def test_an_isolated_replica_downloads_a_package(web: tuple[Steady, Path]) -> None:
    steady, _ = web
    found = get_json(port_of(steady.service("web")), "/pip", timeout=80)
    if found["code"] != 0:
        pytest.skip(f"no package index reachable from here: {found['err'].strip()[-200:]}")
    assert found["files"] and found["files"][0].startswith("six-")


def test_a_controller_sigkill_and_restart_readopts_isolated_replicas(
    web: tuple[Steady, Path],
) -> None:
    steady, _ = web
    before = steady.service("web")
    pids = sorted(r["pid"] for r in ready(before))
    spaces = netns.of_home(steady.home.resolve())
    pid, _ = controller(steady.home)
    helper = netns.helpers(spaces[0])[0]  # a helper lost too: the new controller restarts it
    helper.kill()
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([psutil.Process(pid), helper], timeout=10)
    after = steady.wait_for("web", lambda s: len(ready(s)) == 4, timeout=30, what="4 READY")
    assert controller(steady.home)[0] != pid
    assert sorted(r["pid"] for r in ready(after)) == pids
    assert netns.of_home(steady.home.resolve()) == spaces
    assert all(len(netns.helpers(name)) == 1 for name in spaces)
    client = LoadClient(port_of(after), max_requests=100, max_seconds=20).start()
    deadline = time.monotonic() + 20
    while client.sent < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.stop()
    assert client.sent > 20 and client.failed == 0, client.summary()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_without_isolation_one_fixed_port_replica_serves_on_its_port(
    web: tuple[Steady, Path],
) -> None:
    steady, tmp = web
    spaces = netns.of_home(steady.home.resolve())
    port = free_port()
    one = spec(tmp, "one", replicas=1, message="solo", extra="isolation: none")
    one.write_text(one.read_text().replace("8080", str(port)))
    steady.run("up", str(one), "--wait", "--timeout", "30")
    svc = steady.service("one")
    assert [r["port"] for r in ready(svc)] == [port]  # probed and routed on the file's port
    assert get_json(port_of(svc), "/")["message"] == "solo"
    assert get_json(port, "/")["message"] == "solo"  # on the host's loopback
    assert netns.of_home(steady.home.resolve()) == spaces
    two = spec(tmp, "two", replicas=2, message="x", extra="isolation: none")
    refused = steady.run("up", str(two), check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "service.isolation is none" in refused.stderr


def test_down_all_leaves_no_namespace_or_helper(web: tuple[Steady, Path]) -> None:
    steady, _ = web
    spaces = netns.of_home(steady.home.resolve())
    assert spaces
    steady.run("down", "--all", "-y")
    assert netns.of_home(steady.home.resolve()) == []
    assert not any(netns.helpers(name) for name in spaces)
