"""A version's ``setup`` stops with its update: after ``steady abort``, a failed
``update_deadline_s`` or a newer update, the setup's process tree is gone within
5 s, its half-built environment folder is removed, no environment is linked for
it, and one event says why. One service (one controller) for the whole module;
each case updates it to a version whose setup would sleep an hour."""

from __future__ import annotations

import json
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import _steady_in
from tests.helpers.steady import EXAMPLES, Steady

SERVER = EXAMPLES / "http_server"
GONE_WITHIN_S = 5.0


def spec(tmp: Path, name: str, *, setup: str | None = None, deadline_s: float = 120) -> Path:
    setup_line = f"setup: {json.dumps(setup)}\n" if setup else ""
    path = tmp / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe: {{path: /health, initial_delay_seconds: 10, timeout_seconds: 2}}
          replicas: 1
          update_mode: blue_green
          update_deadline_s: {deadline_s}
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 2
        workdir: {SERVER}
        envs:
          MESSAGE: {name}
        run: python3 server.py
        """)
        + setup_line
    )
    return path


@pytest.fixture(scope="module")
def web() -> Iterator[tuple[Steady, Path]]:
    """Version 1 (no setup) serving, in a home of this module's own."""
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        steady = Steady(home)
        for cli in _steady_in(steady, home):
            cli.run("up", str(spec(Path(tmp), "v1")), "--wait", "--timeout", "60")
            yield cli, Path(tmp)


def slow_setup() -> tuple[str, str]:
    """A setup that would take an hour, then succeed (so that killing only its
    ``sleep`` would let it finish and be linked); and the marker that names it."""
    marker = f"marker-{uuid.uuid4().hex[:12]}"
    return f": {marker}; sleep 3600; echo built", marker


def setup_tree(marker: str) -> list[psutil.Process]:
    """The live processes of the setup named by ``marker``: its bash and all below."""
    found: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            if marker in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
                found.extend(proc.children(recursive=True))
        except psutil.Error:
            continue
    return found


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def build_folders(steady: Steady) -> tuple[list[str], list[str]]:
    """(half-built folders, linked environments) under envs/."""
    root = steady.home / "envs"
    names = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    return [n for n in names if n.startswith(".")], [n for n in names if not n.startswith(".")]


def wait(what: str, done: object, timeout: float) -> float:
    """Poll ``done()`` (bounded); the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if done():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"not {what} within {timeout:g}s")


def setup_events(steady: Steady, version: int) -> list[str]:
    svc = json.loads(steady.run("status", "web", "--events", "--json").stdout)["services"][0]
    prefix = f"setup of version {version} stopped: "
    return [e["reason"] for e in svc["events"] if str(e["reason"]).startswith(prefix)]


def update_with_slow_setup(
    steady: Steady, tmp: Path, name: str, deadline_s: float = 120
) -> tuple[int, list[psutil.Process]]:
    """Update ``web`` to a version whose setup sleeps; once it runs, its version
    and process tree (bash and sleep)."""
    setup, marker = slow_setup()
    steady.run("update", "web", str(spec(tmp, name, setup=setup, deadline_s=deadline_s)))
    version = int(steady.service("web")["version"])
    wait("the setup running", lambda: len(setup_tree(marker)) >= 2, 30)
    tree = setup_tree(marker)
    assert build_folders(steady)[0], "no build folder while the setup runs"
    return version, tree


def assert_stopped(steady: Steady, version: int, tree: list[psutil.Process], why: str) -> None:
    """Within 5 s: the tree is gone and the half-built folder too; nothing is linked;
    one event says why."""
    wait("the setup's processes gone", lambda: not alive(tree), GONE_WITHIN_S)
    wait("the half-built folder removed", lambda: not build_folders(steady)[0], GONE_WITHIN_S)
    assert build_folders(steady)[1] == [], "an environment was linked for an abandoned version"
    events = setup_events(steady, version)
    assert len(events) == 1 and why in events[0], events


def test_abort_stops_the_setup(web: tuple[Steady, Path]) -> None:
    steady, tmp = web
    version, tree = update_with_slow_setup(steady, tmp, "aborted")
    steady.run("abort", "web")
    assert_stopped(steady, version, tree, "steady abort")
    svc = steady.wait_for("web", lambda s: s["update"]["status"] != "IN_PROGRESS", timeout=30)
    assert svc["update"]["status"] == "FAILED"


def test_a_newer_update_stops_the_superseded_setup(web: tuple[Steady, Path]) -> None:
    steady, tmp = web
    version, tree = update_with_slow_setup(steady, tmp, "superseded")
    steady.run("update", "web", str(spec(tmp, "newer")))
    assert_stopped(steady, version, tree, f"superseded by version {version + 1}")
    steady.wait_for(
        "web",
        lambda s: s["update"]["status"] == "SUCCEEDED" and s["status"] == "READY",
        timeout=60,
        what="the newer update done",
    )


def test_a_failed_update_deadline_stops_the_setup(web: tuple[Steady, Path]) -> None:
    steady, tmp = web
    version, tree = update_with_slow_setup(steady, tmp, "late", deadline_s=8)
    steady.wait_for(
        "web",
        lambda s: s["update"]["status"] == "FAILED",
        timeout=30,
        what="the update failed on its deadline",
    )
    assert_stopped(steady, version, tree, "update_deadline_s=8")
