"""``steady pause`` and ``resume`` of a rolling or blue-green update: while held, no
replica is launched or drained, routing stays as it is, and the update deadline
stops counting (rollout/state.py adds the time held to it).

When it was held and for how long in all is kept in the rollout's tables
(rollout/tables.py), so a restarted controller keeps both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from steadyserve.core.planner import Plan
from steadyserve.core.states import EventKind, ReplicaStatus
from steadyserve.core.strategies import strategy_of

if TYPE_CHECKING:
    from steadyserve.controller.port import RolloutPort
    from steadyserve.controller.rollout.state import Rollout
    from steadyserve.controller.rollout.tables import CanaryTable


class Holds:
    """The hold of one service's rolling or blue-green update in flight."""

    def __init__(self, runtime: RolloutPort, owner: Rollout, table: CanaryTable) -> None:
        self.rt = runtime
        self.owner = owner
        self.table = table
        self._held_for: int | None = None
        self._hold: tuple[float | None, float] = (None, 0.0)

    def held(self) -> bool:
        """Whether the rolling or blue-green update in flight is held by ``steady pause``."""
        update = self.owner.update
        if (
            update is None
            or update.id is None
            or not self.owner.updating
            or not strategy_of(update.mode).holds
        ):
            return False
        if self._held_for != update.id:
            self._held_for, self._hold = update.id, self.table.hold(update.id)
        return self._hold[0] is not None

    def paused_seconds(self) -> float:
        """How long the update in flight has been held, in all (the deadline skips it)."""
        self.held()
        since, paused = self._hold
        return paused + (self.rt.clock.wall() - since if since is not None else 0.0)

    def set_held(self, held: bool) -> None:
        update = self.owner.update
        assert update is not None and update.id is not None
        with self.rt.store.transaction():  # the hold and its event commit together
            self.table.set_held(update.id, held, self.rt.clock.wall())
            self.rt.store.add_event(
                self.rt.name,
                None,
                None,
                EventKind.CANARY_STEP,
                f"{update.mode} update {'paused' if held else 'resumed'}",
            )
        self._held_for, self._hold = update.id, self.table.hold(update.id)
        self.rt.wake()

    def hold_plan(self, would_route: frozenset[int]) -> Plan:
        """While held: launch and drain nothing, keep routing what was routed. A
        controller that restarted routed nothing yet: it routes what the update's own
        plan would (``would_route``), or every request failed until ``steady resume``."""
        ready = {r.id for r in self.rt.replicas.values() if r.status == ReplicaStatus.READY}
        routed = self.rt.plan.routable & ready
        return Plan(routable=routed or would_route & ready)
