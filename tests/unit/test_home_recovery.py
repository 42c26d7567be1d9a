"""The home's state when its file is lost: checked backups, the recovery at start,
and the rule that stops only the orphans a state proves its own. Real SQLite files,
real processes where a process is named; no controller."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller import backups, recovery
from steadyserve.controller.orphans import HomeProcess, Known, parse_tag, sort_out
from steadyserve.core.states import (
    Desired,
    ReplicaStatus,
    ServiceStatus,
    UpdateMode,
    VersionOutcome,
)
from steadyserve.home.paths import Home
from steadyserve.store import ReplicaRow, ServiceRow, Store, VersionRow

NOW = 1_800_000_000.0


def with_service(home: Home, name: str = "web", next_id: int = 3) -> Store:
    """A home whose state lists ``name`` with replicas 1 and 2 (the next id ``next_id``)."""
    store = Store(home.ensure().db_path)
    row = ServiceRow(name, ServiceStatus.READY, 1, NOW, 30001, next_replica_id=next_id)
    version = VersionRow(
        name, 1, NOW, "{}", "", mode=UpdateMode.INITIAL, outcome=VersionOutcome.ACTIVE
    )
    store.add_service(row, version)
    for number in (1, 2):
        store.add_replica(ReplicaRow(name, number, 1, ReplicaStatus.READY, NOW), "launching")
    home.service_dir(name).mkdir(parents=True, exist_ok=True)
    return store


def listed(home: Home) -> list[str]:
    store = Store(home.db_path)
    try:
        return [row.name for row in store.services()]
    finally:
        store.close()


def test_two_checked_generations_and_a_damaged_one_is_passed_over(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    store = with_service(home)
    first = backups.take(store, home)
    store.set_service_fields("web", port=30002)
    second = backups.take(store, home)
    third = backups.take(store, home)
    store.close()
    newest, older = backups.generations(home)
    assert first == second == third == newest
    assert sorted(os.listdir(backups.folder(home))) == ["state.db.1", "state.db.2"]
    assert [backups.problem(p) for p in (newest, older)] == [None, None]
    with open(newest, "r+b") as handle:  # a bad write tears the newest copy
        handle.truncate(newest.stat().st_size // 2)
    assert backups.problem(newest) is not None
    assert backups.newest_good(home) == older


def test_problems_are_the_files_content_only(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    db = home.ensure().db_path
    assert backups.problem(db) == "missing"
    db.write_bytes(b"")
    assert backups.problem(db) == "empty (0 bytes)"
    db.write_bytes(b"not a database, but long enough to have a header" * 100)
    assert (backups.problem(db) or "").startswith("unreadable (file is not a database")
    db.unlink()
    with_service(home).close()
    assert backups.problem(db, writable=True) is None


def test_a_fresh_home_stays_fresh(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    assert recovery.prepare(home, NOW) == []
    assert sorted(os.listdir(home.root)) == []


def test_an_empty_state_db_with_nothing_beside_it_is_moved_aside_and_begun_anew(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home").ensure()
    home.db_path.write_bytes(b"")
    (note,) = recovery.prepare(home, NOW)
    assert "starting with a new state" in note
    assert sorted(os.listdir(home.root)) == ["state.db.broken-20270115T080000Z"]


@pytest.mark.parametrize("damage", ["empty", "torn", "deleted"])
def test_a_lost_state_db_beside_a_service_folder_is_restored_from_the_backup(
    tmp_path: Path, damage: str
) -> None:
    home = Home(tmp_path / "home")
    store = with_service(home)
    assert backups.take(store, home) is not None
    store.close()
    db = home.db_path
    size = db.stat().st_size
    if damage == "deleted":
        db.unlink()
    else:
        with open(db, "r+b") as handle:
            handle.truncate(0 if damage == "empty" else size // 2)
    (note,) = recovery.prepare(home, NOW)
    assert "restored the backup" in note and "1 service folder(s) (web)" in note
    assert listed(home) == ["web"]
    aside = sorted(p.name for p in home.root.glob("state.db.broken-*"))
    assert aside == ([] if damage == "deleted" else ["state.db.broken-20270115T080000Z"])


def test_no_backup_is_a_refusal_in_one_line_naming_the_command(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    with_service(home).close()
    home.db_path.write_bytes(b"")
    with pytest.raises(recovery.StateRefused) as refused:
        recovery.prepare(home, NOW)
    line = str(refused.value)
    assert "\n" not in line
    assert "is empty (0 bytes), beside 1 service folder(s) (web)" in line
    assert line.endswith("steady controller restore --empty")
    assert (home.root / "state.db.broken-20270115T080000Z").exists()  # kept, not reused
    assert not home.db_path.exists()
    # The command it names: an empty state, so the controller can start.
    assert "begun empty" in recovery.restore(home, None, NOW + 1)
    assert listed(home) == []


def test_a_restored_state_hands_out_ids_past_every_replica_that_ran(tmp_path: Path) -> None:
    """A backup seconds old: replicas 3..7 started since left their logs; a new
    replica must not share a stray's id (its tag, log, namespace)."""
    home = Home(tmp_path / "home")
    store = with_service(home, next_id=3)
    backups.take(store, home)
    store.close()
    logs = home.service_dir("web") / "replicas"
    logs.mkdir(parents=True)
    (logs / "7.log").write_text("")
    (logs / "7.log.slirp4netns").write_text("")
    home.db_path.write_bytes(b"")
    (note,) = recovery.prepare(home, NOW)
    assert "next replica ids raised past what runs (web: 8)" in note
    store = Store(home.db_path)
    row = store.service("web")
    store.close()
    assert row is not None and row.next_replica_id == 8 and row.desired is Desired.RUNNING


def test_a_name_created_again_starts_its_ids_past_the_logs_of_its_strays(tmp_path: Path) -> None:
    """A service lost with a restored state (created within the backups' period) may
    leave replicas running; created again under its name, its replicas must not take
    their ids (tag, log): the controller starts it past every log (the simulator's seed
    517)."""
    home = Home(tmp_path / "home").ensure()
    assert recovery.top_logged_id(home, "web") == 0
    logs = home.service_dir("web") / "replicas"
    logs.mkdir(parents=True)
    for name in ("2.log", "11.log", "11.log.1", "x.log"):
        (logs / name).write_text("")
    assert recovery.top_logged_id(home, "web") == 11


def test_a_down_whose_first_write_fails_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    store = with_service(home)
    store.execute("PRAGMA query_only = ON")  # SQLite refuses every write, as a full disk does
    with pytest.raises(sqlite3.OperationalError):
        store.begin_down("web", ServiceStatus.READY, purge=False)
    store.execute("PRAGMA query_only = OFF")
    row = store.service("web")
    assert row is not None and row.desired is Desired.RUNNING
    assert row.status is ServiceStatus.READY
    store.close()


def test_restore_checks_the_file_it_is_given(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    with_service(home).close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"")
    with pytest.raises(recovery.StateRefused, match=r"junk\.db: empty"):
        recovery.restore(home, junk, NOW)
    assert listed(home) == ["web"]  # nothing changed


# The orphan rule ---------------------------------------------------------------

ME = psutil.Process()
SERVICES = ("a", "b")


def tagged(service: str, number: int) -> HomeProcess:
    return HomeProcess(ME, service, number, f"0123456789abcdef/{service}/{number}")


replica_keys = st.tuples(st.sampled_from(SERVICES), st.integers(1, 6))


@given(
    running=st.sets(replica_keys, max_size=10),
    recorded=st.sets(replica_keys, max_size=10),
    live=st.sets(replica_keys, max_size=10),
)
def test_only_what_the_state_recorded_and_does_not_run_is_an_orphan(
    running: set[tuple[str, int]], recorded: set[tuple[str, int]], live: set[tuple[str, int]]
) -> None:
    """Whatever runs, whatever the state recorded: a process is stopped only when the
    state recorded its replica and no live replica holds it; every other process no
    one holds is reported (a stray), none is forgotten."""
    found = [tagged(s, n) for s, n in sorted(running)]
    live_tags = {f"0123456789abcdef/{s}/{n}" for s, n in live}
    orphans, strays = sort_out(found, live_tags, set(), Known(recorded, set(SERVICES)))
    keys = {(p.service, p.replica_id) for p in orphans}
    assert keys == (running & recorded) - live
    assert {(p.service, p.replica_id) for p in strays} == running - recorded - live


def test_a_load_balancer_is_an_orphan_only_of_a_service_the_state_knows() -> None:
    group = os.getpgid(0)
    lbs = [HomeProcess(ME, name, None, None, group) for name in ("known", "unknown")]
    orphans, strays = sort_out(lbs, set(), set(), Known(set(), {"known"}))
    assert [p.service for p in orphans] == ["known"]
    assert [p.service for p in strays] == ["unknown"]
    assert sort_out(lbs, set(), {group}, Known(set(), {"known"})) == ([], [])  # claimed


def test_tags_parse_with_slashes_nowhere_else() -> None:
    assert parse_tag("0123456789abcdef/web/12") == ("web", 12)
    assert parse_tag("0123456789abcdef/web") is None
    assert parse_tag("0123456789abcdef/web/x") is None


def test_what_runs_is_adopted_only_when_its_process_tells_all_the_state_needs() -> None:
    """A command replica's leader on the host's network: its row from its process. A
    Python replica (its control secret is derived from a launch time no process
    tells) or a child of a replica: not adopted."""
    base = {"PATH": os.environ["PATH"], "PORT": "41234", "STEADY_SERVICE_VERSION": "2"}
    python_replica = {**base, "STEADY_CONTROL_SECRET": "x"}
    procs = [
        subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
        for env in (base, python_replica)
    ]
    child = subprocess.Popen(["sleep", "30"], env=base)  # in this test's process group
    try:
        rows = [
            recovery.running_replica(HomeProcess(psutil.Process(p.pid), "web", 7, "t"), NOW)
            for p in (*procs, child)
        ]
        command_replica = rows[0]
        assert command_replica is not None
        assert (command_replica.pid, command_replica.port, command_replica.version) == (
            procs[0].pid,
            41234,
            2,
        )
        assert command_replica.status is ReplicaStatus.READY
        assert rows[1:] == [None, None]
    finally:
        for proc in (*procs, child):
            proc.kill()
            proc.wait()
