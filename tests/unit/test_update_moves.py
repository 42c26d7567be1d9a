"""The tables of update status and version outcome moves, pair by pair, and the one
checked writer of each in the store (real SQLite): a move outside its table is
refused in tests, and in a running controller logged, recorded and written."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from steadyserve.core.states import (
    OUTCOME_MOVES,
    UPDATE_MOVES,
    UPDATE_START,
    VERSION_STARTS,
    EventKind,
    IllegalMove,
    ServiceStatus,
    UpdateMode,
    UpdateStatus,
    VersionOutcome,
    check_outcome_move,
    check_update_move,
)
from steadyserve.store import STRICT_MOVES_ENV, ServiceRow, Store, UpdateRow, VersionRow

U = UpdateStatus
O = VersionOutcome  # noqa: E741
# Written out here, not derived from the tables: a change of either is a decision.
ALLOWED_UPDATE = {
    (U.IN_PROGRESS, U.SUCCEEDED),
    (U.IN_PROGRESS, U.FAILED),
    (U.IN_PROGRESS, U.ROLLED_BACK),
}
ALLOWED_OUTCOME = {
    (O.NONE, O.ACTIVE),
    (O.NONE, O.RETIRED),
    (O.NONE, O.FAILED),
    (O.NONE, O.SUPERSEDED),
    (O.IN_PROGRESS, O.ACTIVE),
    (O.IN_PROGRESS, O.FAILED),
    (O.IN_PROGRESS, O.SUPERSEDED),
    (O.IN_PROGRESS, O.CANCELLED),
    (O.IN_PROGRESS, O.RETIRED),  # an in-place change joined its update, which succeeded
    (O.ACTIVE, O.RETIRED),
}


@pytest.mark.parametrize(("old", "new"), list(itertools.product(U, U)))
def test_every_update_status_pair_is_allowed_or_refused_by_the_table(
    old: UpdateStatus, new: UpdateStatus
) -> None:
    if (old, new) in ALLOWED_UPDATE:
        check_update_move(old, new)
    else:
        with pytest.raises(IllegalMove, match=f"update status {old} -> {new}"):
            check_update_move(old, new)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(O, O)))
def test_every_version_outcome_pair_is_allowed_or_refused_by_the_table(
    old: VersionOutcome, new: VersionOutcome
) -> None:
    if (old, new) in ALLOWED_OUTCOME:
        check_outcome_move(old, new)
    else:
        with pytest.raises(IllegalMove, match="version outcome"):
            check_outcome_move(old, new)


def test_the_tables_cover_every_value_and_are_frozen() -> None:
    assert set(UPDATE_MOVES) == set(U) and set(OUTCOME_MOVES) == set(O)
    assert UPDATE_START is U.IN_PROGRESS
    assert set(VERSION_STARTS) == {O.IN_PROGRESS, O.ACTIVE}
    with pytest.raises(TypeError):
        UPDATE_MOVES[U.SUCCEEDED] = frozenset({U.IN_PROGRESS})  # type: ignore[index]
    with pytest.raises(TypeError):
        OUTCOME_MOVES[O.FAILED] = frozenset({O.ACTIVE})  # type: ignore[index]


def _store(tmp_path: Path) -> tuple[Store, UpdateRow]:
    store = Store(tmp_path / "state.db")
    row = ServiceRow(name="svc", status=ServiceStatus.READY, version=1, created_at=1.0, port=1)
    store.add_service(row, VersionRow("svc", 1, 1.0, "{}", "", outcome=O.ACTIVE))
    store.add_version(VersionRow("svc", 2, 2.0, "{}", "", outcome=O.IN_PROGRESS))
    update = store.add_update(
        UpdateRow(None, "svc", UpdateMode.ROLLING, 1, 2, UPDATE_START, "go", 2.0)
    )
    return store, update


def test_the_store_moves_an_update_and_an_outcome_by_the_tables(tmp_path: Path) -> None:
    store, update = _store(tmp_path)
    store.move_update(update, U.SUCCEEDED, "done", 3.0)
    store.move_outcome("svc", 2, O.ACTIVE)
    store.move_outcome("svc", 1, O.RETIRED)
    saved = store.latest_update("svc")
    assert saved is not None and (saved.status, saved.message, saved.finished_at) == (
        U.SUCCEEDED,
        "done",
        3.0,
    )
    assert [v.outcome for v in store.versions("svc")] == [O.RETIRED, O.ACTIVE]
    store.close()


def test_a_move_outside_the_tables_raises_under_strict_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STRICT_MOVES_ENV, "1")
    store, update = _store(tmp_path)
    store.move_update(update, U.FAILED, "failed", 3.0)
    with pytest.raises(IllegalMove):
        store.move_update(update, U.SUCCEEDED, "again", 4.0)
    with pytest.raises(IllegalMove):
        store.move_outcome("svc", 1, O.IN_PROGRESS)
    saved = store.latest_update("svc")
    assert saved is not None and saved.status is U.FAILED  # nothing written
    assert store.versions("svc")[0].outcome is O.ACTIVE
    store.close()


def test_a_running_controller_logs_records_and_writes_a_move_outside_the_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(STRICT_MOVES_ENV, raising=False)
    store, update = _store(tmp_path)
    store.move_update(update, U.FAILED, "failed", 3.0)
    store.move_update(update, U.SUCCEEDED, "again", 4.0)
    store.move_outcome("svc", 1, O.IN_PROGRESS)
    saved = store.latest_update("svc")
    assert saved is not None and saved.status is U.SUCCEEDED  # written, as before the tables
    assert store.versions("svc")[0].outcome is O.IN_PROGRESS
    illegal = [e.reason for e in store.events("svc") if e.to_status == EventKind.ILLEGAL_MOVE]
    assert illegal == [
        "update status FAILED -> SUCCEEDED is not an allowed move",
        "version outcome 'active' -> 'in progress' is not an allowed move",
    ]
    assert "FAILED -> SUCCEEDED" in caplog.text
    store.close()


def test_no_other_store_method_writes_a_status_or_an_outcome(tmp_path: Path) -> None:
    store, update = _store(tmp_path)
    update.status, update.message = U.SUCCEEDED, "renamed"
    store.save_update(update)  # to_version and message only
    saved = store.latest_update("svc")
    assert saved is not None and saved.status is U.IN_PROGRESS and saved.message == "renamed"
    with pytest.raises(AssertionError):
        store.update_version("svc", 2, outcome=O.ACTIVE)
    with pytest.raises(AssertionError):
        store.add_update(UpdateRow(None, "svc", UpdateMode.ROLLING, 1, 2, U.SUCCEEDED, "", 5.0))
    store.close()


def test_a_down_cancels_each_version_in_progress_through_the_checked_writer(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    store.delete_service("svc", purge=False)
    assert [v.outcome for v in store.versions("svc")] == [O.ACTIVE, O.CANCELLED]
    store.close()


@pytest.mark.parametrize("outcome", list(O))
def test_a_new_version_starts_only_as_the_table_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: VersionOutcome
) -> None:
    """Under strict moves a version row is added ``in progress`` or ``active`` only,
    by ``add_version`` and by ``add_service`` alike (the legacy ``""`` included)."""
    monkeypatch.setenv(STRICT_MOVES_ENV, "1")
    store, _ = _store(tmp_path)
    other = ServiceRow(name="other", status=ServiceStatus.READY, version=1, created_at=1.0, port=2)
    if outcome in VERSION_STARTS:
        store.add_version(VersionRow("svc", 3, 3.0, "{}", "", outcome=outcome))
        store.add_service(other, VersionRow("other", 1, 1.0, "{}", "", outcome=outcome))
        assert store.versions("svc")[-1].outcome is outcome
    else:
        with pytest.raises(IllegalMove, match="a new version"):
            store.add_version(VersionRow("svc", 3, 3.0, "{}", "", outcome=outcome))
        with pytest.raises(IllegalMove, match="a new version"):
            store.add_service(other, VersionRow("other", 1, 1.0, "{}", "", outcome=outcome))
        assert [v.version for v in store.versions("svc")] == [1, 2]  # nothing written
        assert store.service("other") is None and store.versions("other") == []
    store.close()


def test_a_running_controller_records_a_new_version_outside_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STRICT_MOVES_ENV, raising=False)
    store, _ = _store(tmp_path)
    store.add_version(VersionRow("svc", 3, 3.0, "{}", "", outcome=O.RETIRED))
    assert store.versions("svc")[-1].outcome is O.RETIRED
    illegal = [e.reason for e in store.events("svc") if e.to_status == EventKind.ILLEGAL_MOVE]
    assert illegal == ["a new version with outcome 'retired' is not an allowed start"]
    store.close()
