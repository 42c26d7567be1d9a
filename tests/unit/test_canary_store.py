"""The progressive-delivery tables on a real SQLite file beside the store's."""

from __future__ import annotations

from pathlib import Path

from steadyserve.controller.canary_store import CanaryTable
from steadyserve.core.canary.steps import CanaryState, Phase
from steadyserve.state import Store


def test_tables_survive_a_new_connection(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()  # the controller's own schema first, as in a real home
    table = CanaryTable(path)
    state = CanaryState(step=2, weight=40, phase=Phase.WAITING, step_started=12.5, reason="r")
    table.save(7, "web", state)
    table.set_held(8, True, now=100.0)
    table.set_held(8, False, now=130.0)
    table.set_held(8, True, now=200.0)
    table.set_switch(9, True, 55.0)
    table.close()
    again = CanaryTable(path)
    assert again.load(7) == state and again.load(1) is None
    assert again.hold(8) == (200.0, 30.0)
    assert again.hold(1) == (None, 0.0)
    assert again.switch(9) == (True, 55.0) and again.switch(1) == (False, None)
    again.close()
