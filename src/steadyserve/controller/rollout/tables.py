"""The rollout's own tables of the state database, on the store's one connection.

``canary_state`` holds each canary update's step machine (one JSON row per
update, written after every move); ``update_holds`` when ``steady pause`` held
a rolling or blue-green update and for how long in all; ``blue_green_switch``
whether a blue-green update was promoted and when it switched. They live in
the controller's SQLite file beside the update rows they key on, and are
written through the :class:`~steadyserve.store.Store` (its connection, its
transactions), so a change of one of them and its event commit together and a
controller restarted mid-update finds all three.
"""

from __future__ import annotations

import json

from steadyserve.core.canary.steps import CanaryState
from steadyserve.store import Store

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS canary_state (
    update_id INTEGER PRIMARY KEY,
    service TEXT NOT NULL,
    state TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS update_holds (
    update_id INTEGER PRIMARY KEY,
    since REAL,
    paused_s REAL NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS blue_green_switch (
    update_id INTEGER PRIMARY KEY,
    promoted INTEGER NOT NULL DEFAULT 0,
    switched_at REAL
)""",
)


class CanaryTable:
    """The canary's step, the holds and the blue-green switch per update."""

    def __init__(self, store: Store) -> None:
        self.store = store
        with store.transaction():
            for statement in _SCHEMA:
                store.execute(statement)

    def load(self, update_id: int) -> CanaryState | None:
        rows = self.store.execute(
            "SELECT state FROM canary_state WHERE update_id = ?", (update_id,)
        )
        return CanaryState.from_json(json.loads(rows[0][0])) if rows else None

    def save(self, update_id: int, service: str, state: CanaryState) -> None:
        self.store.execute(
            "INSERT OR REPLACE INTO canary_state (update_id, service, state) VALUES (?, ?, ?)",
            (update_id, service, json.dumps(state.to_json())),
        )

    def hold(self, update_id: int) -> tuple[float | None, float]:
        """``(held since, seconds paused before)`` of a rolling or blue-green update."""
        rows = self.store.execute(
            "SELECT since, paused_s FROM update_holds WHERE update_id = ?", (update_id,)
        )
        return (rows[0][0], float(rows[0][1])) if rows else (None, 0.0)

    def set_held(self, update_id: int, held: bool, now: float) -> None:
        with self.store.transaction():
            since, paused = self.hold(update_id)
            if held and since is None:
                since = now
            elif not held and since is not None:
                paused += max(0.0, now - since)
                since = None
            self.store.execute(
                "INSERT OR REPLACE INTO update_holds (update_id, since, paused_s) VALUES (?, ?, ?)",
                (update_id, since, paused),
            )

    def switch(self, update_id: int) -> tuple[bool, float | None]:
        """``(promoted, switched_at)`` of a blue-green update."""
        rows = self.store.execute(
            "SELECT promoted, switched_at FROM blue_green_switch WHERE update_id = ?",
            (update_id,),
        )
        return (bool(rows[0][0]), rows[0][1]) if rows else (False, None)

    def set_switch(self, update_id: int, promoted: bool, switched_at: float | None) -> None:
        self.store.execute(
            "INSERT OR REPLACE INTO blue_green_switch (update_id, promoted, switched_at) "
            "VALUES (?, ?, ?)",
            (update_id, int(promoted), switched_at),
        )
