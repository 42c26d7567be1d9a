"""A home whose path is longer than a Unix socket's ``sun_path`` (108 bytes) still
serves handle calls between isolated Python replicas (docs/isolation.md): the
routes socket and the call sockets are bound, and connected, through their
directory's descriptor, and sit in ``<home>/sockets`` like a short home's.

One home for the module; needs root (CI runs as root).
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from steadyserve.backends import netns
from steadyserve.home.paths import Home
from tests.conftest import _steady_in
from tests.helpers.steady import Steady, http_get

APPS = Path(__file__).parent / "apps"
pytestmark = pytest.mark.skipif(
    netns.unavailable() is not None, reason=f"no network isolation: {netns.unavailable()}"
)
FLEET = f"""
services:
  - name: callee
    import_path: isolated_apps:app.Callee
    workdir: {APPS}
    service:
      isolation: network
      replicas: 1
      health_check_period_s: 0.2
      graceful_shutdown_timeout_s: 2

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
"""


@pytest.fixture(scope="module")
def long_home() -> Iterator[Steady]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / ("a-home-whose-path-is-longer-than-sun-path-" + "x" * 70) / "home"
        assert len(os.fsencode(str(home / "sockets" / "routes.sock"))) > 108
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(FLEET)
        for cli in _steady_in(Steady(home), home):
            cli.run("deploy", str(fleet), "--wait", "--timeout", "90")
            yield cli
        assert netns.of_home(home.resolve()) == [], "namespaces left behind"


def test_an_isolated_replica_calls_an_isolated_callee(long_home: Steady) -> None:
    steady = long_home
    prober = steady.service("prober")
    port = int(str(prober["endpoint"]).rsplit(":", 1)[1])
    status, body = http_get(port, "/ping", timeout=45)
    assert (status, body) == (200, b"pong")
    home = Home(steady.home.resolve())
    callee = steady.service("callee")["replicas"][0]
    path = home.call_socket("callee", callee["id"])
    assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.routes_socket.stat().st_mode) == 0o600
    env = psutil.Process(prober["replicas"][0]["pid"]).environ()
    assert env["STEADY_ROUTES_SOCKET"] == str(home.routes_socket)


def sockets_left(home: Home, expected: list[str]) -> list[str]:
    """The socket directory's names once they are ``expected`` (or after 20 s)."""
    deadline = time.monotonic() + 20
    names = sorted(p.name for p in home.sockets_dir.iterdir())
    while names != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        names = sorted(p.name for p in home.sockets_dir.iterdir())
    return names


def test_the_sockets_go_with_the_replicas_and_the_controller(long_home: Steady) -> None:
    steady = long_home
    home = Home(steady.home.resolve())
    steady.run("down", "--all", "-y", timeout=60)
    assert sockets_left(home, ["routes.sock"]) == ["routes.sock"]
    steady.run("controller", "stop", timeout=60)
    assert sockets_left(home, []) == []
