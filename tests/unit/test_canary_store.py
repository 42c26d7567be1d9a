"""The rollout's tables on the store's own connection, in the real SQLite file."""

from __future__ import annotations

from pathlib import Path

from steadyserve.controller.rollout.tables import CanaryTable
from steadyserve.core.canary.steps import CanaryState, Phase
from steadyserve.core.states import EventKind
from steadyserve.store import Store


def test_tables_survive_a_new_connection(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    table = CanaryTable(store)
    state = CanaryState(step=2, weight=40, phase=Phase.WAITING, step_started=12.5, reason="r")
    table.save(7, "web", state)
    table.set_held(8, True, now=100.0)
    table.set_held(8, False, now=130.0)
    table.set_held(8, True, now=200.0)
    table.set_switch(9, True, 55.0)
    store.close()
    store = Store(path)
    again = CanaryTable(store)
    assert again.load(7) == state and again.load(1) is None
    assert again.hold(8) == (200.0, 30.0)
    assert again.hold(1) == (None, 0.0)
    assert again.switch(9) == (True, 55.0) and again.switch(1) == (False, None)
    store.close()


def test_the_tables_open_no_connection_of_their_own(tmp_path: Path) -> None:
    """One connection per state database: a change and its event share a transaction."""
    store = Store(tmp_path / "state.db")
    table = CanaryTable(store)
    state = CanaryState(step=0, weight=10, phase=Phase.RUNNING, step_started=1.0, reason="")
    try:
        with store.transaction():
            table.save(3, "web", state)
            store.add_event("web", None, None, EventKind.CANARY_STEP, "step 1")
            raise RuntimeError("crash mid-change")
    except RuntimeError:
        pass
    assert table.load(3) is None  # rolled back with the event: the same transaction
    assert store.events("web") == []
    store.close()
