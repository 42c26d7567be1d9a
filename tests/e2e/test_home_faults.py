"""Faults of the home's disk, with a live service under load: an empty and a torn
``state.db``, a restore from a backup older than the last replacement, a full disk
(a ``down`` that fails half-way, an update, an ``up``, a new home's start), a
controller port already taken. For each, the service answers every
request throughout and is listed again afterwards; nothing of it is stopped.

One home for the module, on a small tmpfs of its own where the machine lets the
test mount one (root), so that the disk can be filled and emptied at will.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steadyserve.controller import backups
from steadyserve.home.paths import Home
from tests.conftest import _steady_in
from tests.e2e.test_updates import port_of, spec_text, write
from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady, processes_of_home

TMPFS_SIZE = "48m"
REPLICAS = 2


@dataclass
class Shared:
    """The module's one home and its service's endpoint."""

    cli: Steady
    root: Path
    port: int
    on_tmpfs: bool


def _mount_tmpfs(where: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


def _unmount(where: Path) -> None:
    for _ in range(20):  # the home's last processes may take a moment to go
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(0.25)
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def home() -> Iterator[Shared]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        disk = Path(tmp) / "disk"
        disk.mkdir()
        on_tmpfs = _mount_tmpfs(disk)
        try:
            root = disk / "home"
            for cli in _steady_in(Steady(root), root):
                spec = spec_text(replicas=REPLICAS).replace(
                    "initial_delay_seconds: 10", "initial_delay_seconds: 3"
                )
                cli.run("up", str(write(Path(tmp), spec, "web.yaml")), "--wait")
                yield Shared(cli, root, port_of(cli.service("web")), on_tmpfs)
        finally:
            if on_tmpfs:
                _unmount(disk)


@contextlib.contextmanager
def served(home: Shared, what: str) -> Iterator[LoadClient]:
    """Load on the endpoint for the whole block: every request must be answered."""
    client = LoadClient(home.port, max_seconds=120).start()
    time.sleep(0.3)
    try:
        yield client
    finally:
        time.sleep(0.3)
        client.stop()
        report(f"home fault {what}: {client.summary()}")
    assert client.sent > 20, client.summary()
    assert client.failed == 0, client.summary()


def ready_ids(svc: dict[str, Any]) -> list[int]:
    return [r["id"] for r in svc["replicas"] if r["status"] == "READY"]


def listed_again(home: Shared) -> dict[str, Any]:
    """The service is listed, at full strength, by a controller that stopped nothing."""
    svc = home.cli.wait_for(
        "web", lambda s: len(ready_ids(s)) == REPLICAS, what="web listed with its replicas READY"
    )
    assert port_of(svc) == home.port
    log = (home.root / "controller.log").read_text()
    assert "stopping orphan" not in log
    # The controller, the load balancer and one process per replica: none added, none lost.
    assert len(processes_of_home(home.root)) == REPLICAS + 2
    return svc


def controller_pid(home: Shared) -> int:
    return int(json.loads((home.root / "controller.json").read_text())["pid"])


def broken_files(home: Shared) -> list[str]:
    return sorted(p.name for p in home.root.glob("state.db.broken-*") if "-wal" not in p.name)


def test_an_empty_state_db_is_recovered_not_taken_for_a_fresh_home(home: Shared) -> None:
    with served(home, "state.db emptied"):
        home.cli.run("controller", "stop")
        before = broken_files(home)
        (home.root / "state.db").write_bytes(b"")
        out = home.cli.run("status", "web").stdout
        assert "web" in out
        listed_again(home)
    assert len(broken_files(home)) == len(before) + 1
    log = (home.root / "controller.log").read_text()
    assert "was empty (0 bytes)" in log and "restored the backup" in log


def test_a_torn_state_db_after_a_controller_kill_is_recovered(home: Shared) -> None:
    with served(home, "state.db torn after SIGKILL"):
        os.kill(controller_pid(home), signal.SIGKILL)
        time.sleep(0.2)
        db = home.root / "state.db"
        with open(db, "r+b") as handle:
            handle.truncate(db.stat().st_size // 2)
        home.cli.run("status", "web")
        listed_again(home)
    last = (home.root / "controller.log").read_text().rsplit("state.db of", 1)[-1]
    assert last.startswith(f" {home.root} was unreadable") and "restored the backup" in last


def test_a_backup_older_than_a_replacement_adopts_the_replica_started_since(
    home: Shared, tmp_path: Path
) -> None:
    """The backup lists replicas A and B and load balancer L; after it, L and B died
    and L' and C replaced them. Restored from it, the state takes L' and C back from
    what runs: served throughout, nothing relaunched, B's row failed."""
    home.cli.run("controller", "stop")  # its last backup: A and B
    stale = tmp_path / "stale.db"
    shutil.copyfile(home.root / "backups" / "state.db.1", stale)
    home.cli.run("controller", "start")
    first_lb = home.cli.service("web")["load_balancer_pid"]
    os.kill(first_lb, signal.SIGKILL)  # restarted: a pid the backup does not name
    before = ready_ids(home.cli.service("web"))
    victim = home.cli.service("web")["replicas"][-1]
    os.kill(victim["pid"], signal.SIGKILL)
    after = home.cli.wait_for(
        "web",
        lambda s: (
            len(ready_ids(s)) == REPLICAS
            and victim["id"] not in ready_ids(s)
            and s["load_balancer_pid"] not in (None, first_lb)
        ),
        what="the replacement READY and a new load balancer",
    )
    assert ready_ids(after) != before
    with served(home, "state.db emptied, the backup older than a replacement"):
        home.cli.run("controller", "stop")
        (home.root / "state.db").write_bytes(b"")
        for old in (home.root / "backups").glob("state.db.*"):
            old.unlink()
        shutil.copyfile(stale, home.root / "backups" / "state.db.1")
        home.cli.run("status", "web")
        svc = listed_again(home)
    assert ready_ids(svc) == ready_ids(after)  # the replacement adopted, none launched
    assert svc["load_balancer_pid"] == after["load_balancer_pid"]  # kept, not restarted
    adopted = f"(web load balancer, web replica {ready_ids(after)[-1]})"
    log = (home.root / "controller.log").read_text()
    assert f"adopted what runs and the backup did not list {adopted}" in log


def test_a_taken_controller_port_is_the_reason_a_start_gives(home: Shared) -> None:
    with socket.socket() as taken, served(home, "controller port taken"):
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        home.cli.run("controller", "stop")
        blocked = Steady(home.root, {"STEADY_CONTROLLER_PORT": str(port)})
        failed = blocked.run("controller", "start", check=False)
        assert failed.returncode == 1
        assert failed.stderr.strip().splitlines() == [
            f"error: OSError: [Errno 98] Address already in use (127.0.0.1:{port})"
        ]
        home.cli.run("controller", "start")
        listed_again(home)


def fill(where: Path) -> Path:
    """Take every free byte of the file system holding ``where``."""
    filler = where / "filler"
    with open(filler, "wb", buffering=0) as handle:
        free = shutil.disk_usage(where).free
        with contextlib.suppress(OSError):
            os.posix_fallocate(handle.fileno(), 0, free)
        chunk = b"\0" * 4096
        for _ in range(100_000):  # what fallocate left, a page at a time
            try:
                handle.write(chunk)
            except OSError:
                break
    return filler


def one_line_full(result: subprocess.CompletedProcess[str], home: Shared) -> None:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"the disk holding {home.root} is full (" in lines[0] and "free)" in lines[0]


def test_a_full_disk_changes_nothing_and_says_so_in_one_line(home: Shared, tmp_path: Path) -> None:
    if not home.on_tmpfs:
        pytest.skip("a tmpfs to fill needs mount (root)")
    versions = home.root / "services" / "web" / "versions"
    kept = sorted(os.listdir(versions))
    generations = backups.generations(Home(home.root))
    kept_backups = [p for p in generations if p.exists()]
    assert kept_backups
    with served(home, "full disk"):
        filler = fill(home.root.parent)
        try:
            # A down that fails half-way (its first write): the service stays listed
            # and managed, not forgotten while it runs.
            one_line_full(home.cli.run("down", "web", check=False), home)
            assert home.cli.service("web")["status"] == "READY"
            spec = spec_text(replicas=REPLICAS, message="v2")
            update = home.cli.run(
                "update", "web", str(write(tmp_path, spec, "v2.yaml")), check=False
            )
            one_line_full(update, home)
            assert sorted(os.listdir(versions)) == kept  # no half-written version
            other = spec_text(name="other", replicas=1)
            up = home.cli.run("up", str(write(tmp_path, other, "other.yaml")), check=False)
            one_line_full(up, home)
            assert sorted(os.listdir(home.root / "services")) == ["web"]  # no folder for it
            # A new home on the full disk: one line, and no empty state.db left behind
            # (which, beside services, would be a broken state to recover).
            fresh = Shared(Steady(home.root.parent / "fresh"), home.root.parent / "fresh", 0, True)
            one_line_full(fresh.cli.run("status", check=False), fresh)
            assert sorted(os.listdir(fresh.root)) == ["controller.lock", "controller.log"]
        finally:
            filler.unlink()
        listed_again(home)
        assert home.cli.service("web")["version"] == 1
    # A backup the full disk cut short never replaced a good one; the state is sound.
    assert [p for p in generations if p.exists()] == kept_backups
    assert [backups.problem(p) for p in kept_backups] == [None] * len(kept_backups)
    assert backups.problem(home.root / "state.db", writable=True) is None
