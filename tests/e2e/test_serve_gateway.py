"""The gateway port as Ray Serve's proxy holds it, end to end on one controller:
from ``serve.start`` (answering ``/-/healthz`` and ``/-/routes`` before any app)
to ``serve.shutdown``, ``steady down --all`` or ``steady controller stop``, which
each free the port and leave no gateway process; ``http_options.request_timeout_s``
answered with Ray's 408; and a driver that exits without ``serve.shutdown``
leaving its applications to the next driver of the home, on the same port."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from steadyserve import serve
from tests.helpers.steady import Steady, processes_of_home


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.getheader("content-type") or "", response.read().decode()
    finally:
        conn.close()


def gateways_of(home: Path) -> list[str]:
    return [
        " ".join(p.cmdline())
        for p in processes_of_home(home)
        if "steadyserve.lb.gateway_server" in p.cmdline()
    ]


@pytest.fixture(scope="module")
def home() -> Iterator[tuple[Steady, Path]]:
    """A home; this process drives it without STEADY_SERVE_HTTP_PORT (its port comes
    from serve.start, as in a Ray script)."""
    saved = {k: os.environ.get(k) for k in ("STEADY_HOME", "STEADY_SERVE_HTTP_PORT")}
    with tempfile.TemporaryDirectory(prefix="steady-gw-") as tmp:
        where = Path(tmp) / "home"
        os.environ["STEADY_HOME"] = str(where)
        os.environ.pop("STEADY_SERVE_HTTP_PORT", None)
        cli = Steady(where)
        try:
            yield cli, where
        finally:
            cli.run("down", "--all", check=False, timeout=120)
            cli.run("controller", "stop", check=False, timeout=60)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            deadline = time.monotonic() + 10
            while processes_of_home(where) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = processes_of_home(where)
            for proc in left:
                proc.kill()
            assert not left, f"orphans: {[p.cmdline() for p in left]}"


def test_the_gateway_from_serve_start_to_serve_shutdown(home: tuple[Steady, Path]) -> None:
    """Before any application Ray's proxy answers 503 "Route table is not populated
    yet."; once one is deployed, 200 "success" and the routes as JSON (and so after
    its delete); a request past ``request_timeout_s`` is Ray's 408; shutdown frees
    the port."""
    _, where = home
    port = free_port()
    serve.start(http_options={"port": port, "request_timeout_s": 1})
    not_yet = (503, "text/plain; charset=utf-8", "Route table is not populated yet.")
    assert get(port, "/-/healthz") == not_yet
    assert get(port, "/-/routes") == not_yet

    @serve.deployment
    def slow(request: object) -> str:
        time.sleep(float(request.query_params.get("s", "0")))  # type: ignore[attr-defined]
        return "slept"

    serve.run(slow.bind(), name="sleepy", route_prefix="/sleepy")
    assert get(port, "/-/healthz") == (200, "text/plain; charset=utf-8", "success")
    assert get(port, "/-/routes") == (200, "application/json", '{"/sleepy":"sleepy"}')
    assert get(port, "/sleepy?s=0")[::2] == (200, "slept")
    late = get(port, "/sleepy?s=5", {"X-Request-Id": "req-42"})
    assert late == (408, "text/plain; charset=utf-8", "Request req-42 timed out after 1.0s.")
    serve.delete("sleepy")
    assert get(port, "/-/healthz")[::2] == (200, "success")  # populated once, as in Ray
    assert get(port, "/-/routes")[::2] == (200, "{}")
    assert gateways_of(where), "serve.delete of the last app keeps the port, as Ray does"
    serve.shutdown()
    assert is_free(port)
    assert not gateways_of(where)


DRIVER = """
import sys
from steadyserve import serve

@serve.deployment
class Hello:
    def __init__(self, name):
        self.name = name

    def __call__(self, request):
        return "hello from " + self.name

if len(sys.argv) > 2:
    serve.start(http_options={"port": int(sys.argv[2])})
serve.run(Hello.bind(sys.argv[1]), name=sys.argv[1], route_prefix="/" + sys.argv[1])
print(sorted(serve.status().applications))
"""


def test_the_next_driver_takes_over_and_each_stop_frees_the_port(
    home: tuple[Steady, Path], tmp_path: Path
) -> None:
    """Ray's detached default: a driver that exits without ``serve.shutdown`` leaves
    its application serving; the next driver of the home, naming no port, finds it
    (``serve.status()``) and deploys beside it on the same port. ``steady controller
    stop`` and ``steady down --all`` each free the port and leave no gateway."""
    cli, where = home
    port = free_port()
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    env = {k: v for k, v in os.environ.items() if k != "STEADY_SERVE_HTTP_PORT"}

    def drive(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert drive("first", str(port)).strip() == "['first']"
    assert drive("second").strip() == "['first', 'second']"  # the first one's app is there
    assert get(port, "/first")[::2] == (200, "hello from first")
    assert get(port, "/second")[::2] == (200, "hello from second")
    routes = json.loads(get(port, "/-/routes")[2])
    assert routes == {"/first": "first", "/second": "second"}

    cli.run("controller", "stop", timeout=60)
    assert is_free(port)
    assert not gateways_of(where)
    cli.run("status")  # a controller again: the applications are back on their port
    deadline = time.monotonic() + 30
    while is_free(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert get(port, "/first")[::2] == (200, "hello from first")

    cli.run("down", "--all", timeout=120)
    assert is_free(port)
    assert not gateways_of(where)
