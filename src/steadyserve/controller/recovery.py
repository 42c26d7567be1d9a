"""A state.db that cannot be read, found at start: recovered, never begun afresh in place.

An empty or torn ``state.db`` (a crash or a full disk while writing) beside
``services/*/`` folders or running processes of the home is not a fresh home:
taking it for one would forget every live service. So before the controller
opens the database it is checked (``PRAGMA integrity_check``); a broken one is
moved aside as ``state.db.broken-TIME`` (with its ``-wal`` and ``-shm``) and the
newest good backup (controller/backups.py) is put in its place. With no good
backup the controller refuses to start, with one line naming what it found and
the command that lets it start. A backup is at most seconds old: replicas
started since are listed again from what runs where their process tells all the
state needs (:func:`adopt_running`); any other process the restored state does
not list is a stray, which the orphan sweep reports and never stops
(controller/orphans.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from steadyserve.controller import backups
from steadyserve.controller.orphans import MACHINE
from steadyserve.controller.process_port import HomeProcess, ProcessPort
from steadyserve.core.states import ReplicaStatus
from steadyserve.home.paths import Home
from steadyserve.store import ReplicaRow, ServiceRow, Store
from steadyserve.wire import replica_contract as contract

_REPLICA_LOG = re.compile(r"(\d+)\.log")


class StateRefused(Exception):
    """The state cannot be recovered without the user: one line saying what and how."""


@dataclass(frozen=True)
class Life:
    """What of the home exists besides its state: a state.db beside these is not new."""

    folders: list[str]
    processes: list[HomeProcess]

    def __bool__(self) -> bool:
        return bool(self.folders or self.processes)

    def describe(self) -> str:
        parts = []
        if self.folders:
            names = ", ".join(self.folders[:5]) + (", ..." if len(self.folders) > 5 else "")
            parts.append(f"{len(self.folders)} service folder(s) ({names})")
        if self.processes:
            parts.append(f"{len(self.processes)} running process(es) of this home")
        return " and ".join(parts)


def find_life(home: Home, machine: ProcessPort = MACHINE) -> Life:
    try:
        folders = sorted(p.name for p in (home.root / "services").iterdir() if p.is_dir())
    except OSError:
        folders = []
    return Life(folders, machine.home_processes(str(home.root)))


def stamp(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def prepare(home: Home, now: float, machine: ProcessPort = MACHINE) -> list[str]:
    """Make ``state.db`` usable before the controller opens it: a no-op for a sound
    or a fresh home; else move it aside and restore the newest good backup. Returns
    what to log; raises StateRefused when no backup can stand in. ``machine``: where
    the home's processes are found (the simulator passes its own)."""
    why = backups.problem(home.db_path, writable=True)
    if why is None:
        return []
    life = find_life(home, machine)
    if not life:
        if why == "missing":
            return []  # a fresh home
        aside = _move_aside(home, now)
        return [
            f"state.db of {home.root} was {why} and nothing of the home runs or is kept:"
            f" starting with a new state ({_kept(aside)})"
        ]
    moved = _move_aside(home, now) if why != "missing" else None
    source = backups.newest_good(home)
    if source is None:
        raise StateRefused(
            f"state.db of {home.root} is {why}, beside {life.describe()} ({_kept(moved)});"
            f" no good backup in {backups.folder(home)}. To start with an empty state, leaving"
            " those processes running unmanaged: steady controller restore --empty"
        )
    _install(home, source)
    adopted = adopt_running(home, life, now, machine)
    raised = _raise_replica_ids(home, life)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(source.stat().st_mtime))
    return [
        f"state.db of {home.root} was {why}, beside {life.describe()} ({_kept(moved)});"
        f" restored the backup {source} of {when}{adopted}{raised}"
    ]


def _kept(moved: Path | None) -> str:
    return f"moved to {moved.name}" if moved is not None else "no file to keep"


def _move_aside(home: Home, now: float) -> Path:
    """Rename the database (and its -wal, -shm) to ``state.db.broken-TIME``: kept
    for whoever wants to look, out of the way of the next start."""
    db = home.db_path
    target = db.with_name(f"{db.name}.broken-{stamp(now)}")
    n = 1
    while target.exists():
        n += 1
        target = db.with_name(f"{db.name}.broken-{stamp(now)}-{n}")
    for suffix in ("-wal", "-shm", ""):  # the main file last: it is what says "broken"
        part = db.with_name(db.name + suffix)
        if part.exists():
            os.rename(part, target.with_name(target.name + suffix))
    backups.fsync(home.root)
    return target


def _install(home: Home, source: Path) -> None:
    """Copy ``source`` in as ``state.db``: temp file, fsync, rename."""
    db = home.db_path
    tmp = db.with_name(f".{db.name}.restore-{os.getpid()}")
    try:
        shutil.copyfile(source, tmp)
        os.chmod(tmp, 0o600)
        backups.fsync(tmp)
        for suffix in ("-wal", "-shm"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)
        os.rename(tmp, db)
        backups.fsync(home.root)
    finally:
        tmp.unlink(missing_ok=True)


def adopt_running(home: Home, life: Life, now: float, machine: ProcessPort = MACHINE) -> str:
    """Rebuild from what runs: a replica of a listed service and of a version the
    restored state holds, running but not listed (started after the backup), is
    listed again as READY, so its service keeps it routed and managed instead of
    replacing it. Only where the state needs nothing the process cannot tell: a
    command replica on the host's network with no GPUs or pinned cores (a Python
    replica's control secret, a namespace, an assignment are not read back). A load
    balancer restarted since, on the service's port, is its load balancer again."""
    store = Store(home.db_path)
    adopted = []
    try:
        listed = {row.name: row for row in store.services()}
        for item in life.processes:
            if item.service not in listed:
                continue
            if item.replica_id is None:
                if _is_its_lb(item, listed[item.service]):
                    store.set_service_fields(
                        item.service, lb_pid=item.proc.pid, lb_create_time=item.proc.create_time()
                    )
                    adopted.append(f"{item.service} load balancer")
                continue
            if any(r.id == item.replica_id for r in store.replicas(item.service)):
                continue
            row = running_replica(item, now, machine)
            if row is not None and store.version(row.service, row.version) is not None:
                store.add_replica(row, "running when the state was restored from a backup")
                adopted.append(f"{row.service} replica {row.id}")
    finally:
        store.close()
    return (
        f"; adopted what runs and the backup did not list ({', '.join(adopted)})" if adopted else ""
    )


def _is_its_lb(item: HomeProcess, row: ServiceRow) -> bool:
    """Whether ``item`` is the leader of a load balancer on ``row``'s port that the
    row does not name (a worker of it, or the one it names, is not)."""
    try:
        cmdline = item.proc.cmdline()
    except psutil.Error:
        return False
    leads = item.group == item.proc.pid and "steadyserve.lb" in cmdline
    port = next((b for a, b in itertools.pairwise(cmdline) if a == "--port"), None)
    return leads and port == str(row.port) and row.lb_pid != item.proc.pid


def running_replica(
    item: HomeProcess, now: float, machine: ProcessPort = MACHINE
) -> ReplicaRow | None:
    """The row of ``item`` when it is a replica's leader that needs no more than
    its process tells (see :func:`adopt_running`); else None."""
    proc = item.proc
    try:
        if not machine.self_contained(item):  # a child, a namespace, pinned cores
            return None
        env = proc.environ()
        if contract.CONTROL_SECRET in env or contract.CUDA_VISIBLE_DEVICES in env:
            return None
        port, version = int(env["PORT"]), int(env[contract.SERVICE_VERSION])
        started = proc.create_time()
    except (psutil.Error, OSError, KeyError, ValueError):
        return None
    assert item.service is not None and item.replica_id is not None
    return ReplicaRow(
        item.service,
        item.replica_id,
        version,
        ReplicaStatus.READY,
        started,
        ip=env.get(contract.HOST, "127.0.0.1"),
        port=port,
        pid=proc.pid,
        pid_create_time=started,
        ready_at=now,
    )


def _raise_replica_ids(home: Home, life: Life) -> str:
    """A restored state may be seconds old: replicas started since have ids it would
    hand out again. Move each service's next id past every id that runs or left a
    log, so a new replica never shares a stray's tag, log or namespace."""
    store = Store(home.db_path)
    raised = []
    try:
        for row in store.services():
            seen = [p.replica_id for p in life.processes if p.service == row.name]
            seen.append(top_logged_id(home, row.name))
            top = max((n for n in seen if n is not None), default=0)
            if top >= row.next_replica_id:
                store.set_service_fields(row.name, next_replica_id=top + 1)
                raised.append(f"{row.name}: {top + 1}")
    finally:
        store.close()
    return f"; next replica ids raised past what runs ({', '.join(raised)})" if raised else ""


def top_logged_id(home: Home, service: str) -> int:
    """The highest replica id that left a log in ``service``'s folder (0: none). A
    replica opens its log before its process starts: a stray that runs unlisted (its
    service lost with a restored state, or begun afresh) left one."""
    logs = home.service_dir(service) / "replicas"
    with contextlib.suppress(OSError):
        found = (int(m[1]) for f in logs.iterdir() if (m := _REPLICA_LOG.fullmatch(f.name)))
        return max(found, default=0)
    return 0


@contextlib.contextmanager
def home_locked(home: Home) -> Iterator[None]:
    """The controller's lock on the home, for changing state.db while none runs."""
    with open(home.controller_lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StateRefused(
                f"a controller holds {home.root}: stop it first (steady controller stop)"
            ) from None
        yield


def restore(home: Home, source: Path | None, now: float) -> str:
    """``steady controller restore [FILE | --empty]``: put ``source`` (a checked state
    database; None: begin empty) in as state.db, the current one moved aside."""
    with home_locked(home):
        try:
            why = backups.problem(source) if source is not None else None
        except sqlite3.Error as exc:
            why = f"unreadable ({exc})"
        if why is not None:
            raise StateRefused(f"{source}: {why}: not restored")
        moved = _move_aside(home, now) if home.db_path.exists() else None
        if source is None:
            Store(home.db_path).close()
            return f"state.db of {home.root} begun empty ({_kept(moved)})"
        _install(home, source)
        raised = _raise_replica_ids(home, find_life(home))
        return f"state.db of {home.root} restored from {source} ({_kept(moved)}){raised}"
