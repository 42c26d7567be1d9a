"""A hostile isolated replica tries to climb out of its sandbox (docs/isolation.md,
docs/security.md) and fails at every step: it cannot read the home's
``control.key`` or list the home, cannot see or signal the controller, cannot
``setns`` into the controller's network or mount namespace (``nsenter`` or the
system call itself), cannot make a namespace of its own or mount anything, and
reads ``CapEff`` 0 with ``no_new_privs`` and a seccomp filter; nor can its
``setup``, which runs in the same sandbox. It still binds
port 80 (below 1024) in its own namespace, writes its ``HOME``, ``/tmp`` and
``/dev/shm``, is held by a pids limit, and, with no SIGTERM handler of its own,
stops at the controller's SIGTERM well within its grace period.

One home for the module; needs root, slirp4netns and bubblewrap (CI has them).
"""

from __future__ import annotations

import json
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from steadyserve.backends import cgroups, netns, sandbox
from steadyserve.wire import replica_contract as contract
from tests.conftest import _steady_in
from tests.helpers.steady import Steady, http_get

APPS = Path(__file__).parent / "apps"
GRACE_S = 60
pytestmark = [
    pytest.mark.skipif(
        netns.unavailable() is not None, reason=f"no network isolation: {netns.unavailable()}"
    ),
    pytest.mark.skipif(
        sandbox.unavailable() is not None, reason=f"no sandbox: {sandbox.unavailable()}"
    ),
]


@pytest.fixture(scope="module")
def climber() -> Iterator[tuple[Steady, dict[str, Any]]]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        workdir = Path(tmp) / "climber"
        workdir.mkdir()
        (workdir / "climber.py").write_text((APPS / "climber.py").read_text())
        path = Path(tmp) / "climber.yaml"
        path.write_text(
            textwrap.dedent(f"""\
            name: climber
            service:
              isolation: network
              readiness_probe: {{path: /health, initial_delay_seconds: 20}}
              replicas: 1
              health_check_period_s: 0.2
              graceful_shutdown_wait_loop_s: 0.05
              graceful_shutdown_timeout_s: {GRACE_S}
            resources:
              ports: 80
            workdir: {workdir}
            setup: |
              cat {home}/control.key && echo "setup read the key" || echo "setup: no key"
              grep -E '^(CapEff|Seccomp):' /proc/self/status
              nsenter --net=/proc/1/ns/net true && echo "setup entered" || echo "setup: no nsenter"
            run: python3 climber.py --port 80
            """)
        )
        for steady in _steady_in(Steady(home), home):
            steady.run("up", str(path), "--wait", "--timeout", "60")
            info = json.loads((home / "controller.json").read_text())
            svc = steady.service("climber")
            port = int(str(svc["endpoint"]).rsplit(":", 1)[1])
            query = f"key={home / 'control.key'}&pid={info['pid']}&home={home}"
            status, body = http_get(port, f"/climb?{query}", timeout=60)
            assert status == 200, body
            yield steady, json.loads(body)


def refused(found: dict[str, Any], attempt: str) -> str:
    answer = str(found[attempt])
    assert answer.startswith("no: "), f"{attempt}: {answer}"
    return answer


def test_it_cannot_read_the_homes_secrets(climber: tuple[Steady, dict[str, Any]]) -> None:
    steady, found = climber
    assert (steady.home / "control.key").exists()  # there, on the host
    assert "FileNotFoundError" in refused(found, "read control.key")
    # The home is a skeleton of the folders bound into it: no file of it is there.
    listing = str(found["list the home"])
    assert "control.key" not in listing and "controller.json" not in listing, listing
    assert "PermissionError" in refused(found, "read /etc/shadow")


def test_its_setup_runs_in_the_same_sandbox(climber: tuple[Steady, dict[str, Any]]) -> None:
    steady, _ = climber
    log = next(steady.home.glob("services/climber/versions/*/setup.log")).read_text()
    assert "setup: no key" in log and "setup read the key" not in log, log
    assert (steady.home / "control.key").read_text().strip() not in log
    assert "CapEff:\t0000000000000000" in log and "Seccomp:\t2" in log, log
    assert "setup: no nsenter" in log and "setup entered" not in log, log


def test_it_cannot_see_or_signal_the_controller(climber: tuple[Steady, dict[str, Any]]) -> None:
    _, found = climber
    refused(found, "see the controller")
    refused(found, "signal the controller")
    pids = found["pids"]
    assert 1 in pids and len(pids) < 10, pids  # the init, the replica, little else


def test_it_cannot_enter_the_controllers_namespaces(
    climber: tuple[Steady, dict[str, Any]],
) -> None:
    _, found = climber
    for attempt in ("nsenter its network", "nsenter its mounts", "nsenter pid 1's network"):
        refused(found, attempt)
    assert "Operation not permitted" in refused(found, "setns pid 1's network")
    refused(found, "setns a /run/netns file")  # /run/netns is not in its mounts


def test_it_cannot_make_namespaces_or_mount(climber: tuple[Steady, dict[str, Any]]) -> None:
    _, found = climber
    for attempt in ("unshare a user namespace", "unshare a mount namespace", "mount a tmpfs"):
        assert "Operation not permitted" in refused(found, attempt)
    refused(found, "unshare -U")
    refused(found, "write /usr")


def test_it_holds_no_privilege(climber: tuple[Steady, dict[str, Any]]) -> None:
    _, found = climber
    status = found["status"]
    for field in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(status[field], 16) == 0, status
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status


def test_it_keeps_what_it_needs(climber: tuple[Steady, dict[str, Any]]) -> None:
    steady, found = climber
    assert [r["port"] for r in steady.service("climber")["replicas"]] == [80]
    home = found["home"]
    assert home.startswith(str(steady.home)) and Path(home).is_dir()  # a folder of the home
    for attempt in ("write HOME", "write /tmp", "write /dev/shm"):
        assert found[attempt].startswith("yes"), (attempt, found[attempt])


def test_it_is_held_by_a_pids_limit(climber: tuple[Steady, dict[str, Any]]) -> None:
    steady, _ = climber
    pid = steady.service("climber")["replicas"][0]["pid"]
    found = cgroups.Cgroups.of_machine().of_pid(pid, contract.home_id(steady.home.resolve()))
    if found is None:
        pytest.skip("no writable cgroups here")
    assert found.pids_limit() == sandbox.DEFAULT_PIDS_MAX


def test_a_sandboxed_replica_on_the_wrong_port_is_named(
    climber: tuple[Steady, dict[str, Any]], tmp_path: Path
) -> None:
    """The controller still sees where a sandboxed replica listens (its processes'
    own /proc tables, from the host's PID namespace)."""
    steady, _ = climber
    workdir = next(steady.home.glob("services/climber/versions/*/workdir"))
    path = tmp_path / "wrong.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: wrong
        service:
          isolation: network
          readiness_probe: {{path: /health, initial_delay_seconds: 60}}
          replicas: 1
          health_check_period_s: 0.2
        workdir: {workdir}
        run: python3 climber.py --port 8081
        """)
    )
    steady.run("up", str(path))
    svc = steady.wait_for(
        "wrong", lambda s: any(r.get("notice") for r in s["replicas"]), what="a notice"
    )
    replica = svc["replicas"][0]
    assert replica["notice"].startswith(f"replica {replica['id']} listens on 8081, not on")
    steady.run("down", "wrong", "-y")


def test_without_a_sigterm_handler_it_stops_at_sigterm(
    climber: tuple[Steady, dict[str, Any]],
) -> None:
    """Its init forwards the SIGTERM: the replica ends long before the grace period's
    SIGKILL (a PID 1 without a handler would ignore it and wait for the kill)."""
    steady, _ = climber
    pid = steady.service("climber")["replicas"][0]["pid"]
    proc = psutil.Process(pid)
    started = time.monotonic()
    steady.run("down", "climber", "-y", timeout=GRACE_S + 30)
    psutil.wait_procs([proc], timeout=GRACE_S + 10)
    assert time.monotonic() - started < GRACE_S / 2
    assert netns.of_home(steady.home.resolve()) == []
