"""Python replicas under ``service.isolation: network`` (docs/isolation.md): the
text_ml graph with every replica in its own network namespace, the Summarizer
calling the Translator through a handle across an in-place reconfigure and a
rolling restart of the callee with no failed request; a handle waking a callee
at zero; and what an isolated replica reaches: the route tables over the
controller's routes-only Unix socket, never the rest of the API.

One home for the module (tests run in file order); needs root (CI runs as root).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from steadyserve.backends import netns
from steadyserve.home.paths import Home
from tests.conftest import _steady_in
from tests.helpers.figures import report
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, api_secret, http_get

APPS = Path(__file__).parent / "apps"
TEXT = "Hello my friend. The cat is in the house. Good morning my friend, my good friend."
QUERY = "/?text=" + TEXT.replace(" ", "+").replace(",", "%2C")
pytestmark = pytest.mark.skipif(
    netns.unavailable() is not None, reason=f"no network isolation: {netns.unavailable()}"
)
EXTRA = f"""
  - name: callee
    import_path: isolated_apps:app.Callee
    workdir: {APPS}
    service:
      isolation: network
      health_check_period_s: 0.2
      graceful_shutdown_timeout_s: 2
      cold_start_timeout_s: 60
      replica_policy:
        min_replicas: 0
        max_replicas: 1
        target_ongoing_requests: 10

  - name: prober
    import_path: isolated_apps:app
    workdir: {APPS}
    envs:
      STEADY_HANDLE_WAIT_S: 30
    service:
      isolation: network
      replicas: 1
      health_check_period_s: 0.2
      graceful_shutdown_timeout_s: 2

  - name: host-prober
    import_path: isolated_apps:app
    workdir: {APPS}
    service:
      isolation: none
      replicas: 1
      health_check_period_s: 0.2
      graceful_shutdown_timeout_s: 2
"""


@pytest.fixture(scope="module")
def graph() -> Iterator[tuple[Steady, Path]]:
    """The text_ml graph and the prober graph, every service isolated, deployed once."""
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        app = Path(tmp) / "text_ml"
        shutil.copytree(EXAMPLES / "text_ml", app)
        fleet = app / "fleet.yaml"
        text = fleet.read_text().replace(
            "    service:\n", "    service:\n      isolation: network\n"
        )
        text = text.replace("health_check_period_s: 1", "health_check_period_s: 0.2")
        text = text.replace("graceful_shutdown_timeout_s: 5", "graceful_shutdown_timeout_s: 2")
        fleet.write_text(text + EXTRA)
        for cli in _steady_in(Steady(home), home):
            cli.run("deploy", str(fleet), "--wait", "--timeout", "90")
            yield cli, fleet
        assert netns.of_home(home.resolve()) == [], "namespaces left behind"


def port_of(svc: dict[str, object]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def replicas(steady: Steady) -> dict[str, list[dict[str, Any]]]:
    """Every service's replicas, from one ``steady status``."""
    return {svc["name"]: svc["replicas"] for svc in steady.status()["services"]}


def own_netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def test_every_python_replica_has_a_network_of_its_own(graph: tuple[Steady, Path]) -> None:
    steady, _ = graph
    listed = replicas(steady)
    pids = [r["pid"] for name in ("translator", "summarizer", "prober") for r in listed[name]]
    assert len(pids) == 4
    spaces = {own_netns(pid) for pid in pids}
    assert len(spaces) == 4 and own_netns(os.getpid()) not in spaces
    assert len(netns.of_home(steady.home.resolve())) == 4


def test_handle_calls_follow_reconfigure_and_a_rolling_restart(graph: tuple[Steady, Path]) -> None:
    steady, fleet = graph
    port = port_of(steady.service("summarizer"))
    status, body = http_get(port, QUERY, timeout=20)
    assert (status, body.decode()) == (200, "Bon matin mon ami, mon bon ami.")

    # In place (user_config through the runner's control port in its namespace).
    pids = sorted(r["pid"] for r in steady.service("translator")["replicas"])
    client = LoadClient(port, path=QUERY, max_seconds=60).start()
    time.sleep(0.3)
    fleet.write_text(fleet.read_text().replace("language: french", "language: german"))
    out = steady.run("deploy", str(fleet), "--wait", "--timeout", "60").stdout
    assert "in place" in out
    marker = time.time()
    assert sorted(r["pid"] for r in steady.service("translator")["replicas"]) == pids
    # Rolling restart of the callee (new processes, new namespaces) under the same load.
    fleet.write_text(
        fleet.read_text().replace(
            "    import_path: text_ml:app.Translator\n",
            "    import_path: text_ml:app.Translator\n    envs:\n      REVISION: '2'\n",
        )
    )
    steady.run("deploy", str(fleet), "--wait", "--timeout", "90")
    time.sleep(0.3)
    client.stop()
    report(f"isolated handle calls across reconfigure + rolling restart: {client.summary()}")
    assert client.failed == 0, client.summary()
    assert client.sent > 20
    later = {b.decode() for t, b in client.bodies if t > marker}
    assert later == {"Gut morgen mein freund, mein gut freund."}
    translator = steady.wait_for(
        "translator",
        lambda svc: (
            len(svc["replicas"]) == 2 and all(r["pid"] not in pids for r in svc["replicas"])
        ),
        what="the old translator replicas to be gone",
    )
    assert all(own_netns(r["pid"]) != own_netns(os.getpid()) for r in translator["replicas"])


def test_a_handle_call_wakes_a_callee_at_zero(graph: tuple[Steady, Path]) -> None:
    """The wake goes to the routes-only socket: the controller's port is out of reach."""
    steady, _ = graph
    assert steady.service("callee")["total_replicas"] == 0
    status, body = http_get(port_of(steady.service("prober")), "/ping", timeout=45)
    assert (status, body) == (200, b"pong")
    assert steady.service("callee")["total_replicas"] == 1


def test_a_replica_on_the_hosts_network_calls_an_isolated_callee(
    graph: tuple[Steady, Path],
) -> None:
    """The callee's address is on its own loopback: a caller on the host's network
    calls it at its Unix socket too (the route table says it is isolated)."""
    steady, _ = graph
    caller = steady.service("host-prober")
    assert own_netns(caller["replicas"][0]["pid"]) == own_netns(os.getpid())
    status, body = http_get(port_of(caller), "/ping", timeout=45)
    assert (status, body) == (200, b"pong")


def test_an_isolated_replica_reaches_the_route_tables_and_nothing_else(
    graph: tuple[Steady, Path],
) -> None:
    steady, _ = graph
    status, body = http_get(port_of(steady.service("prober")), "/reach", timeout=20)
    assert status == 200, body
    seen = json.loads(body)
    # The controller's port is on the host's loopback: no answer at all, not even a 401.
    assert not isinstance(seen["api_tcp"], int), seen
    assert not isinstance(seen["routes_tcp"], int), seen
    # The routes-only socket: the tables with the routes token, nothing else of the API.
    assert (seen["api_unix"], seen["routes_unix"], seen["routes_unix_no_token"]) == (404, 200, 401)


def test_the_sockets_are_the_owners_only(graph: tuple[Steady, Path]) -> None:
    steady, _ = graph
    home = Home(steady.home.resolve())
    assert stat.S_IMODE(home.sockets_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(home.routes_socket.stat().st_mode) == 0o600
    secret = api_secret(steady.home)
    listed = replicas(steady)
    for name in ("translator", "summarizer", "prober"):
        for replica in listed[name]:
            path = home.call_socket(name, replica["id"])
            assert stat.S_ISSOCK(path.stat().st_mode), path
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            env = psutil.Process(replica["pid"]).environ()
            assert env["STEADY_ROUTES_SOCKET"] == str(home.routes_socket)
            assert secret not in env.values()  # handles hold the routes-only token
    on_host = psutil.Process(listed["host-prober"][0]["pid"]).environ()
    assert "STEADY_ROUTES_SOCKET" not in on_host and "STEADY_CALL_SOCKET" in on_host
    # Replicas gone (the translator's rolling restart) took their sockets with them.
    live = {home.call_socket(name, r["id"]) for name, rs in listed.items() for r in rs}
    assert set(home.sockets_dir.iterdir()) == live | {home.routes_socket}


def test_a_killed_replica_leaves_no_call_socket(graph: tuple[Steady, Path]) -> None:
    """SIGKILL skips the runner's own cleanup; stopping the dead replica removes it."""
    steady, _ = graph
    home = Home(steady.home.resolve())
    old = steady.service("prober")["replicas"][0]
    path = home.call_socket("prober", old["id"])
    assert path.exists()
    os.kill(old["pid"], signal.SIGKILL)
    new = steady.wait_for(
        "prober",
        lambda svc: any(r["id"] != old["id"] and r["status"] == "READY" for r in svc["replicas"]),
        what="a replacement prober replica",
    )
    deadline = time.monotonic() + 10
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.exists()
    replacement = next(r for r in new["replicas"] if r["id"] != old["id"])
    assert home.call_socket("prober", replacement["id"]).exists()
    status, body = http_get(port_of(new), "/ping", timeout=20)
    assert (status, body) == (200, b"pong")
