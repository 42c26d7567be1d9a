"""Blue-green extras (``service.blue_green``): a preview port, a switch that waits
for ``steady promote``, and the old version kept warm after the switch.

The planner decides (core/strategies/blue_green.py's ``switch_allowed`` and ``keep_old``);
this module tells it what the spec and the commands say, remembers when the
switch happened and whether it was promoted (in the rollout's tables of the state
database, rollout/tables.py, each with its event in one transaction, so a
restarted controller keeps both), and gives the load balancer the preview.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from steadyserve.controller.errors import BadInput
from steadyserve.core.planner import ReplicaView
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode

if TYPE_CHECKING:
    from steadyserve.controller.port import RolloutPort
    from steadyserve.controller.rollout.state import Rollout
    from steadyserve.controller.rollout.tables import CanaryTable

MODE = UpdateMode.BLUE_GREEN
EVENT = EventKind.BLUE_GREEN


class BlueGreen:
    """The blue-green update in flight of one service (idle otherwise)."""

    def __init__(self, runtime: RolloutPort, owner: Rollout, table: CanaryTable) -> None:
        self.rt = runtime
        self.owner = owner
        self.table = table
        self._for: int | None = None
        self._promoted = False
        self._switched_at: float | None = None
        self._announced = False

    def _update_id(self) -> int | None:
        update = self.owner.update
        if update is None or update.id is None or not self.owner.updating or update.mode != MODE:
            return None
        if self._for != update.id:
            self._for = update.id
            self._promoted, self._switched_at = self.table.switch(update.id)
            self._announced = False
        return update.id

    def options(self, target: int, version: int, views: Sequence[ReplicaView]) -> dict[str, Any]:
        """The UpdateStep's ``switch_allowed`` and ``keep_old`` for this tick."""
        update_id = self._update_id()
        if update_id is None:
            return {}
        policy = self.rt.spec.service.blue_green
        allowed = policy.auto_promote or self._promoted
        ready = sum(1 for v in views if v.version == version and v.status is ReplicaStatus.READY)
        now = self.rt.clock.wall()
        if ready >= target and not allowed and not self._announced:
            self._announced = True
            where = f"; preview on port {policy.preview_port}" if policy.preview_port else ""
            self._event(f"{ready} new replicas READY: waiting for steady promote{where}")
        if ready >= target and allowed and self._switched_at is None:
            delay = policy.scale_down_delay_s
            warm = f"; version kept warm {delay:g}s for steady abort" if delay else ""
            with self.rt.store.transaction():  # the switch and its event commit together
                self.table.set_switch(update_id, self._promoted, now)
                self._event(f"switched to version {version}{warm}")
            self._switched_at = now
        delay = policy.scale_down_delay_s
        keep = self._switched_at is not None and delay > 0 and now < self._switched_at + delay
        return {"switch_allowed": allowed, "keep_old": keep}

    def promote(self) -> str:
        update_id = self._update_id()
        assert update_id is not None
        policy = self.rt.spec.service.blue_green
        if policy.auto_promote:
            raise BadInput(
                f"{self.rt.name}: this blue-green update switches by itself "
                "(service.blue_green.auto_promote is true)"
            )
        if self._promoted or self._switched_at is not None:
            raise BadInput(f"{self.rt.name}: the blue-green update is already promoted")
        with self.rt.store.transaction():
            self.table.set_switch(update_id, True, self._switched_at)
            self._event("promoted: switching when every new replica is READY")
        self._promoted = True
        self.rt.wake()
        return "promoted: the switch happens once every new replica is READY"

    def preview(self) -> tuple[int, int] | None:
        """The route table's ``preview`` (port, version): the port that serves only
        the new version."""
        if self._update_id() is None:
            return None
        port = self.rt.spec.service.blue_green.preview_port
        update = self.owner.update
        if port is None or update is None:
            return None
        return port, update.to_version

    def _event(self, message: str) -> None:
        self.rt.store.add_event(self.rt.name, None, None, EVENT, message)
