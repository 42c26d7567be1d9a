"""Per-version environments end to end: a dependency pinned to 1.0 in v1 and 2.0
in v2, updated and rolled back, each version answering from its own virtualenv;
an in-place update builds nothing; a failed build fails the version in one line.
Packages come from wheels built in the test's folder (no network)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.steady import Steady, http_get
from tests.helpers.wheels import make_wheel, offline_env

APP = """\
import sys

import pinme


class Pinned:
    def __init__(self):
        self.greeting = "none"

    def reconfigure(self, config):
        self.greeting = config["greeting"]

    def __call__(self, request):
        return {"pinme": pinme.__version__, "prefix": sys.prefix, "greeting": self.greeting}
"""

SERVER = """\
import http.server, json, os, sys

import pinme


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"pinme": pinme.__version__, "prefix": sys.prefix}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    make_wheel(folder, "pinme", "1.0")
    make_wheel(folder, "pinme", "2.0")
    return folder


def service_file(tmp: Path, wheels: Path, name: str, body: str) -> Path:
    envs = "".join(f"\n  {k}: '{v}'" for k, v in offline_env(wheels).items())
    path = tmp / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(body)
        + f"envs:{envs}\n"
        + textwrap.dedent("""\
        service:
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_timeout_s: 3
          graceful_shutdown_wait_loop_s: 0.05
          readiness_probe: {path: /, initial_delay_seconds: 30}
        """)
    )
    return path


def pinned(tmp: Path, wheels: Path, version: str, greeting: str) -> Path:
    app = tmp / "app"
    app.mkdir(exist_ok=True)
    (app / "app.py").write_text(APP)
    path = service_file(
        tmp,
        wheels,
        f"pinned-{version}-{greeting}",
        f"""\
        name: pinned
        import_path: app:Pinned
        workdir: {app}
        pip: ["pinme=={version}"]
        """,
    )
    text = path.read_text().replace(
        "service:\n", f"service:\n  history_limit: 1\n  user_config: {{greeting: {greeting}}}\n"
    )
    path.write_text(text)
    return path


def answer(svc: dict[str, Any]) -> dict[str, Any]:
    port = int(str(svc["endpoint"]).rsplit(":", 1)[1])
    status, body = http_get(port)
    assert status == 200, body
    data: dict[str, Any] = json.loads(body)
    return data


def builds(steady: Steady) -> int:
    return (steady.home / "controller.log").read_text().count("built environment")


def envs_on_disk(steady: Steady) -> list[str]:
    root = steady.home / "envs"
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def test_update_and_rollback_each_run_their_own_packages(
    steady: Steady, tmp_path: Path, wheels: Path
) -> None:
    steady.run("up", str(pinned(tmp_path, wheels, "1.0", "hi")), "--wait", "--timeout", "90")
    first = answer(steady.service("pinned"))
    assert first["pinme"] == "1.0"
    assert Path(first["prefix"]).parent.parent == steady.home / "envs"
    assert builds(steady) == 1

    steady.run(
        "update", "pinned", str(pinned(tmp_path, wheels, "2.0", "hi")), "--wait", "--timeout", "90"
    )
    second = answer(steady.service("pinned"))
    assert second["pinme"] == "2.0" and second["prefix"] != first["prefix"]
    assert builds(steady) == 2

    steady.run("rollback", "pinned", "--wait", "--timeout", "90")
    svc = steady.service("pinned")
    back = answer(svc)
    assert back["pinme"] == "1.0" and back["prefix"] == first["prefix"]  # v1's own, kept
    assert builds(steady) == 2
    on_disk = envs_on_disk(steady)
    assert len(on_disk) == 2  # v1's files are pruned (history_limit 1), its environment is v3's

    # v2's replicas finish stopping after the rollback returns; a version whose
    # replicas still run keeps its files, so the next command prunes v2 only once
    # they are gone.
    svc = steady.wait_for(
        "pinned",
        lambda s: all(r["version"] != 2 for r in s["replicas"]),
        what="version 2's replicas stopped",
    )
    # An in-place update (user_config only) builds nothing and restarts nothing.
    pids = sorted(r["pid"] for r in svc["replicas"] if r["status"] == "READY")
    out = steady.run(
        "update", "pinned", str(pinned(tmp_path, wheels, "1.0", "bye")), "--wait", "--timeout", "60"
    ).stdout
    assert "in place" in out
    after = steady.service("pinned")
    assert sorted(r["pid"] for r in after["replicas"]) == pids
    again = answer(after)
    assert again == {"pinme": "1.0", "prefix": first["prefix"], "greeting": "bye"}
    assert builds(steady) == 2
    # v2's files were pruned with it, and with them the environment only v2 used.
    assert envs_on_disk(steady) == [Path(first["prefix"]).parent.name]


def test_setup_installs_into_the_versions_environment(
    steady: Steady, tmp_path: Path, wheels: Path
) -> None:
    app = tmp_path / "server"
    app.mkdir()
    (app / "server.py").write_text(SERVER)
    path = service_file(
        tmp_path,
        wheels,
        "cmd",
        f"""\
        name: cmd
        workdir: {app}
        setup: pip install pinme==2.0
        run: python server.py
        """,
    )
    steady.run("up", str(path), "--wait", "--timeout", "90")
    data = answer(steady.service("cmd"))
    assert data["pinme"] == "2.0"
    assert Path(data["prefix"]).parent.parent == steady.home / "envs"
    # The replica's log starts with its environment's build output (setup's among it).
    (log,) = (steady.home / "services" / "cmd" / "replicas").glob("*.log")
    assert "--- setup ---" in log.read_text()


def test_a_failed_build_fails_the_version_in_one_line(
    steady: Steady, tmp_path: Path, wheels: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.py").write_text(APP)
    path = service_file(
        tmp_path,
        wheels,
        "broken",
        f"""\
        name: broken
        import_path: app:Pinned
        workdir: {app}
        pip: ["pinme==9.9"]
        """,
    )
    steady.run("up", str(path))
    svc = steady.wait_for("broken", lambda s: s["status"] == "FAILED", timeout=90, what="FAILED")
    assert [r["status"] for r in svc["replicas"]] == ["FAILED_PROVISION"]
    events = steady.run("status", "broken", "--events").stdout
    assert "pip exited with code" in events and "pinme" in events
    assert envs_on_disk(steady) == []


SHADOWED = """\
import http.server, importlib.util, json, os

import iniconfig


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(
            {
                "iniconfig": iniconfig.__version__,
                "file": iniconfig.__file__,
                "pytest": importlib.util.find_spec("pytest") is not None,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


def test_setup_installs_a_package_the_controller_has_and_rollback_restores_it(
    steady: Steady, tmp_path: Path, wheels: Path
) -> None:
    """SkyPilot's ray_serve.yaml shape (``setup: pip install "ray[serve]"``): the
    controller has the package too (iniconfig, which pytest needs), at another
    version. The version's environment must install its own copy, not answer
    "already satisfied" from the controller's, and must not see packages only
    the controller has (pytest)."""
    make_wheel(wheels, "iniconfig", "98.0")
    make_wheel(wheels, "iniconfig", "99.0")
    app = tmp_path / "shadow"
    app.mkdir()
    (app / "server.py").write_text(SHADOWED)

    def version(setup: str) -> Path:
        return service_file(
            tmp_path,
            wheels,
            f"shadow-{len(setup)}",
            f"""\
            name: shadow
            workdir: {app}
            setup: {json.dumps(setup)}
            run: python server.py
            """,
        )

    steady.run("up", str(version("pip install 'iniconfig<99'")), "--wait", "--timeout", "90")
    first = answer(steady.service("shadow"))
    assert first["iniconfig"] == "98.0" and not first["pytest"], first
    assert Path(first["file"]).is_relative_to(steady.home / "envs")

    steady.run(
        "update", "shadow", str(version("pip install iniconfig")), "--wait", "--timeout", "90"
    )
    second = answer(steady.service("shadow"))
    assert second["iniconfig"] == "99.0" and not second["pytest"], second

    steady.run("rollback", "shadow", "--wait", "--timeout", "90")
    back = answer(steady.service("shadow"))
    assert back["iniconfig"] == "98.0" and back["file"] == first["file"], back
