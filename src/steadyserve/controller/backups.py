"""Backups of the state database that a bad write cannot destroy.

``state.db`` is the one record of which processes are the home's services. A
crash or a full disk can leave it empty or torn; a copy kept apart lets the
next controller start from what was true a few seconds earlier
(controller/recovery.py) instead of from nothing. Each copy is taken with
SQLite's online backup API (consistent while the controller keeps writing),
checked with ``PRAGMA integrity_check``, fsynced, and only then renamed over
the older generation: a copy cut short by a full disk or a crash is a temp
file that never replaces a good one. Two generations are kept::

    backups/state.db.1    the newest good copy
    backups/state.db.2    the one before

The controller takes one at start, every ``EVERY_S`` seconds when rows changed,
and at a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
from pathlib import Path

from steadyserve.controller.clock import Clock
from steadyserve.home.paths import Home
from steadyserve.store import Store

log = logging.getLogger("steadyserve.controller")

GENERATIONS = 2
_CONTENT_ERRORS = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
"""SQLite's errors that condemn a file's content (not its disk or its permissions)."""
EVERY_S = 2.0
"""How stale a backup may be while rows change: what a restore can lose is at most
this long (replicas started meanwhile are reported, never stopped)."""


def folder(home: Home) -> Path:
    return home.root / "backups"


def generations(home: Home) -> list[Path]:
    """The backup files, newest first (present or not)."""
    return [folder(home) / f"state.db.{n}" for n in range(1, GENERATIONS + 1)]


def problem(path: Path, *, writable: bool = False) -> str | None:
    """Why ``path``'s content is not a usable state database, or None when it is.
    ``writable`` for the live one, whose -wal a read-only open may not replay.

    Only the content condemns a file (empty, not a database, damaged): SQLite's
    other errors (a full disk, an I/O error, no permission) say nothing about it
    and are raised, so that a sound state is never moved aside for them."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        return "missing" if isinstance(exc, FileNotFoundError) else f"unreadable ({exc.strerror})"
    if size == 0:
        return "empty (0 bytes)"
    try:
        db = sqlite3.connect(f"file:{path}?mode={'rw' if writable else 'ro'}", uri=True)
        try:
            row = db.execute("PRAGMA integrity_check").fetchone()
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "").startswith(_CONTENT_ERRORS):
            return f"unreadable ({exc})"
        raise
    if not row or row[0] != "ok":
        return f"damaged (integrity_check: {row[0] if row else 'no answer'})"
    if "services" not in tables:
        return "not a SteadyServe state (no services table)"
    return None


def newest_good(home: Home) -> Path | None:
    """The newest backup that passes the check, or None."""
    for path in generations(home):
        with contextlib.suppress(sqlite3.Error):
            if problem(path) is None:
                return path
    return None


def fsync(path: Path) -> None:
    """Flush a file's data, or a folder's entries (a rename), to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Taking:
    """One backup at a time in a process (the periodic copy, a thread, may still run
    when the last one starts), and a failure said once per cause, not every few seconds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.failing = ""


_TAKING = _Taking()


def take(store: Store, home: Home) -> Path | None:
    """Copy the live database into the newest generation; None (logged) when the copy
    could not be made or checked, the older generations untouched."""
    with _TAKING.lock:
        return _take(store, home)


def _take(store: Store, home: Home) -> Path | None:
    where = folder(home)
    tmp = where / f".state.db.{os.getpid()}.tmp"
    try:
        where.mkdir(mode=0o700, exist_ok=True)
        tmp.unlink(missing_ok=True)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        store.copy_to(tmp)
        _single_file(tmp)
        why = problem(tmp)
        if why is not None:
            raise sqlite3.DatabaseError(f"the copy is {why}")
        fsync(tmp)
        kept = generations(home)
        for n in range(len(kept) - 1, 0, -1):  # .1 -> .2: the oldest drops off
            if kept[n - 1].exists():
                os.replace(kept[n - 1], kept[n])
        os.replace(tmp, kept[0])
        fsync(where)
    except (OSError, sqlite3.Error) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if str(exc) != _TAKING.failing:
            log.warning("backup of the state in %s not taken: %s", where, exc)
        _TAKING.failing = str(exc)
        return None
    if _TAKING.failing:
        log.info("backup of the state in %s taken again", where)
        _TAKING.failing = ""
    return kept[0]


def _single_file(path: Path) -> None:
    """A copy of a WAL database is itself in WAL mode: make it a single file that a
    restore can copy whole (no -wal or -shm beside it)."""
    db = sqlite3.connect(str(path), isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=DELETE")
    finally:
        db.close()


async def keep(store: Store, home: Home, clock: Clock) -> None:
    """Take a backup every ``EVERY_S`` seconds when rows changed (until cancelled)."""
    seen = store.changes()
    while True:
        await clock.sleep(EVERY_S)
        now = store.changes()
        if now != seen and await asyncio.to_thread(take, store, home) is not None:
            seen = now
