"""The SQLite store: services, versions (full spec text), replicas, events.

One file under ``$STEADY_HOME`` in WAL mode, so a controller killed mid-write
leaves a consistent database and a restarted controller re-adopts what runs.
Only the controller writes; every method is one short transaction. Rows carry
the lifecycle enums of ``steadyserve.core.states`` (rows.py). An update's status and
a version's outcome change only through :meth:`Store.move_update` and
:meth:`Store.move_outcome`, checked against ``UPDATE_MOVES`` and ``OUTCOME_MOVES``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

from steadyserve.core.states import (
    UPDATE_START,
    Desired,
    EventKind,
    EventState,
    IllegalMove,
    ReplicaStatus,
    ServiceStatus,
    UpdateStatus,
    VersionOutcome,
    check_outcome_move,
    check_update_move,
    check_version_start,
)
from steadyserve.store.rows import EventRow, ReplicaRow, ServiceRow, UpdateRow, VersionRow

__all__ = ["EventRow", "ReplicaRow", "ServiceRow", "Store", "UpdateRow", "VersionRow"]

log = logging.getLogger("steadyserve.state")
STRICT_MOVES_ENV = "STEADY_STRICT_MOVES"
"""Set to ``1`` (the test suite does): a move outside the tables raises instead."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS services (
    name TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    port INTEGER NOT NULL,
    lb_pid INTEGER,
    lb_create_time REAL,
    next_replica_id INTEGER NOT NULL DEFAULT 1,
    desired TEXT NOT NULL DEFAULT 'running',
    purge INTEGER NOT NULL DEFAULT 0,
    stable_version INTEGER NOT NULL DEFAULT 1,
    owner TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS updates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    service TEXT NOT NULL,
    mode TEXT NOT NULL,
    from_version INTEGER NOT NULL,
    to_version INTEGER NOT NULL,
    status TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    started_at REAL NOT NULL,
    finished_at REAL,
    stable_replicas INTEGER
);
CREATE TABLE IF NOT EXISTS versions (
    service TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    spec_json TEXT NOT NULL,
    spec_yaml TEXT NOT NULL,
    workdir_hash TEXT,
    mode TEXT NOT NULL DEFAULT 'initial',
    changes TEXT NOT NULL DEFAULT '',
    outcome TEXT NOT NULL DEFAULT '',
    base_version INTEGER,
    pruned INTEGER NOT NULL DEFAULT 0,
    served INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (service, version)
);
CREATE TABLE IF NOT EXISTS replicas (
    service TEXT NOT NULL,
    id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    ip TEXT NOT NULL DEFAULT '127.0.0.1',
    port INTEGER,
    pid INTEGER,
    pid_create_time REAL,
    launched_at REAL NOT NULL,
    ready_at REAL,
    control_port INTEGER,
    assignment TEXT,
    netns TEXT,
    PRIMARY KEY (service, id)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    service TEXT NOT NULL,
    replica_id INTEGER,
    time REAL NOT NULL,
    from_status TEXT,
    to_status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_by_service ON events (service, id);
"""


def _columns(cls: type[Any]) -> list[str]:
    return [f.name for f in fields(cls)]


class Store:
    """Typed access to the state database; rows in, rows out."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            _create(path)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add columns newer than a database written by an older release."""
        for table, column, decl in (
            ("versions", "base_version", "INTEGER"),
            ("versions", "pruned", "INTEGER NOT NULL DEFAULT 0"),
            ("versions", "served", "INTEGER NOT NULL DEFAULT 0"),
            ("services", "owner", "TEXT NOT NULL DEFAULT ''"),
            ("updates", "stable_replicas", "INTEGER"),
            ("replicas", "assignment", "TEXT"),
            ("replicas", "netns", "TEXT"),
        ):
            have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")

    def close(self) -> None:
        self._db.close()

    def changes(self) -> int:
        """Rows written through this connection so far: a backup is due when it moved."""
        return self._db.total_changes

    def copy_to(self, path: Path) -> None:
        """A consistent copy of what is committed, at ``path`` (SQLite's online backup,
        on a connection of its own: safe from a thread while this one writes)."""
        source, dest = sqlite3.connect(str(self.path)), sqlite3.connect(str(path))
        with contextlib.closing(source), contextlib.closing(dest):
            source.backup(dest)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes so a crash leaves all of them or none; inside another
        transaction, part of that one (a change of several rows is one transaction)."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement on this connection: the rollout's own tables
        (controller/rollout/tables.py) live in this file and change in its transactions."""
        return self._db.execute(sql, args).fetchall()

    def _insert(self, table: str, row: Any) -> None:
        cols = _columns(type(row))
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        self._db.execute(sql, [getattr(row, c) for c in cols])

    def _update(self, table: str, keys: dict[str, Any], values: dict[str, Any]) -> None:
        if not values:
            return
        sets = ", ".join(f"{k} = ?" for k in values)
        where = " AND ".join(f"{k} = ?" for k in keys)
        self._db.execute(
            f"UPDATE {table} SET {sets} WHERE {where}", [*values.values(), *keys.values()]
        )

    def _select(
        self, cls: type[Any], table: str, where: str = "", args: tuple[Any, ...] = ()
    ) -> list[Any]:
        cols = _columns(cls)
        sql = f"SELECT {', '.join(cols)} FROM {table} {where}"
        return [cls(*r) for r in self._db.execute(sql, args).fetchall()]

    # services
    def add_service(self, service: ServiceRow, version: VersionRow) -> None:
        with self.transaction():
            self._check_start(version)
            self._insert("services", service)
            self._insert("versions", version)
            self.add_event(service.name, None, None, service.status, "service created")

    def services(self) -> list[ServiceRow]:
        rows: list[ServiceRow] = self._select(ServiceRow, "services", "ORDER BY created_at, name")
        return rows

    def service(self, name: str) -> ServiceRow | None:
        rows: list[ServiceRow] = self._select(ServiceRow, "services", "WHERE name = ?", (name,))
        return rows[0] if rows else None

    def set_service_fields(self, name: str, **values: Any) -> None:
        self._update("services", {"name": name}, values)

    def set_service_status(
        self, name: str, old: ServiceStatus | None, new: ServiceStatus, reason: str
    ) -> None:
        with self.transaction():
            self._update("services", {"name": name}, {"status": new})
            self.add_event(name, None, old, new, reason)

    def begin_down(self, name: str, old: ServiceStatus, purge: bool) -> None:
        """Record a down before anything stops, in one transaction: a controller that
        dies mid-way finishes it on restart, and a write that fails changes nothing."""
        with self.transaction():
            self.set_service_fields(name, desired=Desired.DOWN, purge=int(purge))
            self.set_service_status(name, old, ServiceStatus.SHUTTING_DOWN, "steady down")

    def known_replicas(self) -> set[tuple[str, int]]:
        """Every (service, replica id) this state ever recorded: a replica row is added,
        with its event, before its process starts, so a process whose tag is not
        here was not started by this state (and is not provably its orphan)."""
        rows = self._db.execute(
            "SELECT DISTINCT service, replica_id FROM events WHERE replica_id IS NOT NULL"
        ).fetchall()
        return {(str(s), int(i)) for s, i in rows}

    def known_services(self) -> set[str]:
        """Every service listed or with history kept."""
        rows = self._db.execute("SELECT name FROM services UNION SELECT service FROM versions")
        return {str(r[0]) for r in rows.fetchall()}

    def has_history(self, name: str) -> bool:
        """Whether a service that is not running left versions behind (a down
        without ``--purge``): its history and events stay readable."""
        row = self._db.execute(
            "SELECT 1 FROM versions WHERE service = ? LIMIT 1", (name,)
        ).fetchone()
        return row is not None

    def take_replica_id(self, name: str) -> int:
        """Hand out the next replica id; ids are never reused within a service."""
        with self.transaction():
            row = self._db.execute(
                "SELECT next_replica_id FROM services WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise KeyError(name)
            self._db.execute(
                "UPDATE services SET next_replica_id = ? WHERE name = ?", (row[0] + 1, name)
            )
        return int(row[0])

    def next_free_replica_id(self, name: str) -> int:
        """After a down without purge, ids continue where the old events left off."""
        row = self._db.execute(
            "SELECT MAX(replica_id) FROM events WHERE service = ?", (name,)
        ).fetchone()
        return int(row[0]) + 1 if row and row[0] is not None else 1

    def delete_service(self, name: str, *, purge: bool) -> None:
        """Forget a service's live rows; its versions and events stay unless purged."""
        with self.transaction():
            self._db.execute("DELETE FROM services WHERE name = ?", (name,))
            self._db.execute("DELETE FROM replicas WHERE service = ?", (name,))
            self._db.execute("DELETE FROM updates WHERE service = ?", (name,))
            if purge:
                self._db.execute("DELETE FROM versions WHERE service = ?", (name,))
                self._db.execute("DELETE FROM events WHERE service = ?", (name,))
            else:
                # An update cut short by the down must not stay "in progress" forever.
                for row in self.versions(name):
                    if row.outcome is VersionOutcome.IN_PROGRESS:
                        self.move_outcome(name, row.version, VersionOutcome.CANCELLED)
                self.add_event(name, None, None, EventKind.DELETED, "service taken down")

    # versions
    def add_version(self, version: VersionRow) -> None:
        with self.transaction():
            self._check_start(version)
            self._insert("versions", version)

    def _check_start(self, version: VersionRow) -> None:
        """A new version's outcome is one of ``VERSION_STARTS``, checked as moves are."""
        self._checked(
            version.service, lambda _, new: check_version_start(new), None, version.outcome
        )

    def version(self, service: str, version: int) -> VersionRow | None:
        rows: list[VersionRow] = self._select(
            VersionRow, "versions", "WHERE service = ? AND version = ?", (service, version)
        )
        return rows[0] if rows else None

    def versions(self, service: str) -> list[VersionRow]:
        rows: list[VersionRow] = self._select(
            VersionRow, "versions", "WHERE service = ? ORDER BY version", (service,)
        )
        return rows

    def latest_version_number(self, service: str) -> int:
        row = self._db.execute(
            "SELECT MAX(version) FROM versions WHERE service = ?", (service,)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def update_version(self, service: str, version: int, **values: Any) -> None:
        """Other columns than ``outcome``, which only :meth:`move_outcome` writes."""
        assert "outcome" not in values, "a version's outcome changes only by move_outcome"
        self._update("versions", {"service": service, "version": version}, values)

    def move_outcome(self, service: str, version: int, new: VersionOutcome) -> None:
        """The one write of a version's outcome, checked against ``OUTCOME_MOVES``."""
        with self.transaction():
            row = self.version(service, version)
            old = row.outcome if row is not None else VersionOutcome.NONE
            self._checked(service, check_outcome_move, old, new)
            self._update("versions", {"service": service, "version": version}, {"outcome": new})

    def move_update(
        self, update: UpdateRow, new: UpdateStatus, message: str, finished_at: float | None
    ) -> None:
        """The one write of an update's status, checked against ``UPDATE_MOVES``; the
        row's message and finish time change with it."""
        assert update.id is not None
        with self.transaction():
            self._checked(update.service, check_update_move, update.status, new)
            values = {"status": new, "message": message, "finished_at": finished_at}
            self._update("updates", {"id": update.id}, values)
        update.status, update.message, update.finished_at = new, message, finished_at

    def _checked(self, service: str, check: Callable[[Any, Any], None], old: Any, new: Any) -> None:
        """A move outside its table is a controller bug: under ``STEADY_STRICT_MOVES=1``
        (the tests) it raises; a running controller logs it, records an ``ILLEGAL_MOVE``
        event and makes the write anyway, as it did before the tables, rather than leave
        an update half ended or stop supervising the service."""
        try:
            check(old, new)
        except IllegalMove as exc:
            if os.environ.get(STRICT_MOVES_ENV) == "1":
                raise
            log.error("%s: %s", service, exc)
            self.add_event(service, None, None, EventKind.ILLEGAL_MOVE, str(exc))

    # updates
    def add_update(self, update: UpdateRow) -> UpdateRow:
        assert update.status is UPDATE_START, "an update starts IN_PROGRESS"
        cur = self._db.execute(
            "INSERT INTO updates (service, mode, from_version, to_version, status, message, "
            "started_at, finished_at, stable_replicas) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                update.service,
                update.mode,
                update.from_version,
                update.to_version,
                update.status,
                update.message,
                update.started_at,
                update.finished_at,
                update.stable_replicas,
            ),
        )
        update.id = cur.lastrowid
        return update

    def latest_update(self, service: str) -> UpdateRow | None:
        rows: list[UpdateRow] = self._select(
            UpdateRow, "updates", "WHERE service = ? ORDER BY id DESC LIMIT 1", (service,)
        )
        return rows[0] if rows else None

    def updates(self, service: str) -> list[UpdateRow]:
        """Every update of ``service``, oldest first (for the metrics)."""
        rows: list[UpdateRow] = self._select(
            UpdateRow, "updates", "WHERE service = ? ORDER BY id", (service,)
        )
        return rows

    def save_update(self, update: UpdateRow) -> None:
        assert update.id is not None
        self._update(
            "updates",
            {"id": update.id},
            # Its status (and the end's message and time) change only by move_update.
            {"to_version": update.to_version, "message": update.message},
        )

    # replicas
    def add_replica(self, replica: ReplicaRow, reason: str) -> None:
        with self.transaction():
            self._insert("replicas", replica)
            self.add_event(replica.service, replica.id, None, replica.status, reason)

    def replicas(self, service: str) -> list[ReplicaRow]:
        rows: list[ReplicaRow] = self._select(
            ReplicaRow, "replicas", "WHERE service = ? ORDER BY id", (service,)
        )
        return rows

    def update_replica(self, service: str, replica_id: int, **values: Any) -> None:
        self._update("replicas", {"service": service, "id": replica_id}, values)

    def set_replica_status(
        self, replica: ReplicaRow, new: ReplicaStatus, reason: str, **values: Any
    ) -> None:
        """Move a replica to a new state and record the transition as an event row.
        The controller calls this only through its one checked ``transition()``."""
        old = replica.status
        with self.transaction():
            self._update(
                "replicas",
                {"service": replica.service, "id": replica.id},
                {"status": new, **values},
            )
            self.add_event(replica.service, replica.id, old, new, reason)
        replica.status = new
        for key, value in values.items():
            setattr(replica, key, value)

    def remove_replica(self, replica: ReplicaRow, reason: str) -> None:
        with self.transaction():
            self._db.execute(
                "DELETE FROM replicas WHERE service = ? AND id = ?", (replica.service, replica.id)
            )
            self.add_event(replica.service, replica.id, replica.status, EventKind.STOPPED, reason)

    # events
    def add_event(
        self,
        service: str,
        replica_id: int | None,
        old: EventState | None,
        new: EventState,
        reason: str,
    ) -> None:
        self._db.execute(
            "INSERT INTO events (service, replica_id, time, from_status, to_status, reason) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (service, replica_id, time.time(), old, new, reason),
        )

    def events(self, service: str, limit: int = 200) -> list[EventRow]:
        rows: list[EventRow] = self._select(
            EventRow,
            "events",
            "WHERE service = ? ORDER BY id DESC LIMIT ?",
            (service, limit),
        )
        return list(reversed(rows))

    def integrity_ok(self) -> bool:
        row = self._db.execute("PRAGMA integrity_check").fetchone()
        return bool(row and row[0] == "ok")


def _create(path: Path) -> None:
    """A new database, made beside ``path`` and linked into place once its schema
    is written: a full disk or a crash meanwhile leaves no state.db at all, never an
    empty one (which a home with services running must not be taken for)."""
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        db = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            db.executescript(SCHEMA)
        finally:
            db.close()
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: use that
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
