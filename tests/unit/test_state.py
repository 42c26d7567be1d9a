"""The SQLite store: rows round-trip, ids are never reused, events record transitions."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from steadyserve.controller.versions import VersionJudge
from steadyserve.core.states import ReplicaStatus, ServiceStatus, VersionOutcome
from steadyserve.store import ReplicaRow, ServiceRow, Store, VersionRow
from steadyserve.store.database import SCHEMA


def make_store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "state.db")
    store.add_service(
        ServiceRow(
            name="svc", status=ServiceStatus.CONTROLLER_INIT, version=1, created_at=1.0, port=30001
        ),
        VersionRow(
            service="svc",
            version=1,
            created_at=1.0,
            spec_json="{}",
            spec_yaml="run: x",
            outcome=VersionOutcome.ACTIVE,
        ),
    )
    return store


def test_database_is_wal_and_private(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert store.integrity_ok()


def test_replica_ids_are_never_reused(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    ids = [store.take_replica_id("svc") for _ in range(5)]
    assert ids == [1, 2, 3, 4, 5]
    reopened = Store(tmp_path / "state.db")
    assert reopened.take_replica_id("svc") == 6


def test_replica_transitions_are_events(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    replica = ReplicaRow(
        service="svc", id=1, version=1, status=ReplicaStatus.PENDING, launched_at=2.0
    )
    store.add_replica(replica, "launch")
    store.set_replica_status(replica, ReplicaStatus.STARTING, "process started", pid=123, port=4000)
    store.set_replica_status(replica, ReplicaStatus.READY, "probe passed")
    [row] = store.replicas("svc")
    assert (row.status, row.pid, row.port) == ("READY", 123, 4000)
    events = [(e.replica_id, e.from_status, e.to_status, e.reason) for e in store.events("svc")]
    assert events[1:] == [
        (1, None, "PENDING", "launch"),
        (1, "PENDING", "STARTING", "process started"),
        (1, "STARTING", "READY", "probe passed"),
    ]
    store.remove_replica(replica, "scaled down")
    assert store.replicas("svc") == []
    assert store.events("svc")[-1].to_status == "STOPPED"


def test_versions_and_delete(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.add_version(
        VersionRow(
            service="svc",
            version=2,
            created_at=3.0,
            spec_json="{}",
            spec_yaml="",
            outcome=VersionOutcome.IN_PROGRESS,
        )
    )
    assert store.latest_version_number("svc") == 2
    assert [v.version for v in store.versions("svc")] == [1, 2]
    store.delete_service("svc", purge=False)
    assert store.service("svc") is None
    assert store.versions("svc")  # history kept without purge
    store.delete_service("svc", purge=True)
    assert store.versions("svc") == [] and store.events("svc") == []


def test_failed_transaction_changes_nothing(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    try:
        with store.transaction():
            store.set_service_fields("svc", status="READY")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    svc = store.service("svc")
    assert svc is not None and svc.status == "CONTROLLER_INIT"


def test_that_a_version_served_outlives_the_controller(tmp_path: Path) -> None:
    """The proof that a version served is a column of its row, set once: a restarted
    controller that lists no replica of it that was READY does not judge it broken
    (simulator seed 67). A database of an older release gets the column, as 0."""
    store = make_store(tmp_path)
    kept: list[int] = []
    judge = VersionJudge([], [], lambda why: None, kept.append)
    judge.served(1)
    judge.served(1)
    assert kept == [1]  # written once, not on every READY replica
    store.update_version("svc", 1, served=kept[0])
    reopened = Store(tmp_path / "state.db")
    assert [v.served for v in reopened.versions("svc")] == [1]
    old = sqlite3.connect(str(tmp_path / "old.db"))
    old.executescript(SCHEMA.replace("    served INTEGER NOT NULL DEFAULT 0,\n", ""))
    old.close()
    assert "served" not in _columns_of(tmp_path / "old.db")
    Store(tmp_path / "old.db")
    assert "served" in _columns_of(tmp_path / "old.db")


def _columns_of(path: Path) -> set[str]:
    db = sqlite3.connect(str(path))
    try:
        return {row[1] for row in db.execute("PRAGMA table_info(versions)")}
    finally:
        db.close()
