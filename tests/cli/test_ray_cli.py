"""``steady ray``: Ray's ``serve`` verbs against one real controller and gateway.

``serve run`` blocking until SIGINT (which shuts Serve down and frees the port),
``--non-blocking`` with HTTP through the gateway, ``build`` -> ``deploy`` of the
built file -> ``status`` -> ``config`` -> ``shutdown -y`` freeing the port, and
bad input exiting 2 with one line and nothing changed. One controller for the
module; the tests run in file order.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers.steady import Steady, http_get, processes_of_home

APP = """\
from ray import serve
from starlette.requests import Request


@serve.deployment(user_config={"message": "built"}, health_check_period_s=0.5)
class Echo:
    def __init__(self) -> None:
        self.message = "unset"

    def reconfigure(self, config: dict) -> None:
        self.message = config["message"]

    async def __call__(self, request: Request) -> dict:
        return {"message": self.message, "path": request.url.path}


app = Echo.bind()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(scope="module")
def ray_home() -> Iterator[tuple[Steady, int, Path]]:
    """A home, its gateway port (STEADY_SERVE_HTTP_PORT) and a folder with the app."""
    with tempfile.TemporaryDirectory(prefix="steady-ray-cli-") as tmp:
        home, apps = Path(tmp) / "home", Path(tmp) / "apps"
        apps.mkdir()
        (apps / "echo_app.py").write_text(APP)
        port = free_port()
        cli = Steady(home, {"STEADY_SERVE_HTTP_PORT": str(port)})
        try:
            yield cli, port, apps
        finally:
            cli.run("down", "--all", check=False, timeout=120)
            cli.run("controller", "stop", check=False, timeout=60)
            deadline = time.monotonic() + 10
            while processes_of_home(home) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = processes_of_home(home)
            for proc in left:
                proc.kill()
            assert not left, f"orphans: {[p.cmdline() for p in left]}"


def answer(port: int, path: str, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, body = http_get(port, path)
            if status == 200:
                return dict(json.loads(body))
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no 200 from :{port}{path}")
        time.sleep(0.2)


def test_run_blocks_until_sigint_then_shuts_serve_down(ray_home: tuple[Steady, int, Path]) -> None:
    cli, port, apps = ray_home
    command = [sys.executable, "-m", "steadyserve.cli", "ray", "run", "echo_app:app"]
    proc = subprocess.Popen(
        [*command, "-d", str(apps), "--route-prefix", "/blocked"],
        env=cli.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert answer(port, "/blocked/x")["message"] == "built"
        assert proc.poll() is None  # still blocking
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Got KeyboardInterrupt, shutting down..." in err
    assert cli.status()["services"] == []
    assert port_is_free(port)


def test_run_non_blocking_serves_through_the_gateway(ray_home: tuple[Steady, int, Path]) -> None:
    cli, port, apps = ray_home
    out = cli.run(
        "ray", "run", "echo_app:app", "-d", str(apps), "--non-blocking",
        "--route-prefix", "/run", "--name", "runapp", "-r",
    )  # fmt: skip
    assert "note: --reload: does not apply here" in out.stderr
    assert answer(port, "/run/x", timeout=5) == {"message": "built", "path": "/run/x"}
    status = yaml.safe_load(cli.run("ray", "status", "--name", "runapp").stdout)
    assert status["status"] == "RUNNING" and status["route_prefix"] == "/run"


def test_build_deploy_status_config_shutdown(
    ray_home: tuple[Steady, int, Path], tmp_path: Path
) -> None:
    cli, port, apps = ray_home
    built = tmp_path / "serve_config.yaml"
    cli.run("ray", "build", "echo_app:app", "-d", str(apps), "-o", str(built))
    config = yaml.safe_load(built.read_text())
    (app,) = config["applications"]
    assert config["http_options"] == {"port": port}
    assert app == {
        "name": "app1",
        "route_prefix": "/",
        "import_path": "echo_app:app",
        "runtime_env": {"working_dir": str(apps)},
        "deployments": [
            {"name": "Echo", "user_config": {"message": "built"}, "health_check_period_s": 0.5}
        ],
    }
    cli.run("ray", "deploy", str(built))
    assert answer(port, "/y")["path"] == "/y"
    status = yaml.safe_load(cli.run("ray", "status").stdout)
    assert status == yaml.safe_load(cli.run("status", "--format", "ray").stdout)
    assert set(status["applications"]) == {"app1", "runapp"}
    assert yaml.safe_load(cli.run("ray", "config", "--name", "app1").stdout) == app
    both = cli.run("ray", "config").stdout.split("\n---\n\n")
    assert sorted(yaml.safe_load(t)["name"] for t in both) == ["app1", "runapp"]
    out = cli.run("ray", "shutdown", "-y", "--json")
    assert json.loads(out.stdout) == {"applications": ["app1", "runapp"]}
    assert cli.status()["services"] == []
    assert port_is_free(port)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "echo_app:app", "a=b=c"], "Invalid application argument 'a=b=c'"),
        (["run", "echo_app:app", "--route-prefix", "run"], "Invalid route_prefix 'run'"),
        (["run", "nosuch:app", "--non-blocking"], "cannot import module 'nosuch'"),
        (["build", "nosuch:app"], "nosuch:app: cannot import module 'nosuch'"),
        (["status", "--name", "nope"], 'Application "nope" does not exist.'),
        (["config", "--name", "nope"], 'No config has been deployed for application "nope".'),
        (["shutdown"], "pass -y to confirm"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    ray_home: tuple[Steady, int, Path], args: list[str], message: str
) -> None:
    cli, _, _ = ray_home
    before = generated(cli)
    out = cli.run("ray", *args, check=False)
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: "), out.stderr
    assert message in out.stderr
    assert cli.status()["services"] == []
    assert generated(cli) == before


def generated(cli: Steady) -> dict[str, str]:
    """The configs ``ray run`` wrote into the home, by file name."""
    return {p.name: p.read_text() for p in (cli.home / "ray_run").glob("*.yaml")}


def test_a_ray_option_that_does_not_apply_is_named(ray_home: tuple[Steady, int, Path]) -> None:
    cli, _, _ = ray_home
    out = cli.run("ray", "status", "-a", "http://localhost:52365")
    assert out.stderr == (
        "note: --address: does not apply here (steady talks to the controller of STEADY_HOME)\n"
    )
    assert yaml.safe_load(out.stdout) == {"applications": {}, "target_capacity": None}
