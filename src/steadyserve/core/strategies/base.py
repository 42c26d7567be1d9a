"""What every update strategy is: a mode, the pure plan of one step, the counts a dry
run shows, and the few facts the controller asks of it instead of its name.

The controller never tests an update's mode: it asks its strategy (``restarts``,
``holds``, ``deadline``...). The registry (``STRATEGIES``, filled by
core/strategies/__init__.py) maps each mode to its one strategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple

from steadyserve.core.planner import STOP_ORDER, Plan, ReplicaView, oldest_first, scaled_down
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode


@dataclass(frozen=True)
class UpdateStep:
    """What one step of an update is planned from: the target, the replicas as they
    are now, the spec's limits, and what the update's own progress says (a canary's
    weight, a blue-green switch), each read by the strategies it concerns."""

    target: int
    new_version: int
    replicas: Sequence[ReplicaView]
    max_surge: int = 1
    max_unavailable: int = 0
    old_broken: bool = False
    """The stable (from) version is judged broken: never relaunched."""
    stable_target: int | None = None
    """The size the stable version heals to (planner.stable_size)."""
    room: int | None = None
    """How many more replicas fit on the machine now (None: no limit)."""
    switch_allowed: bool = True
    """Blue-green: the switch may happen (``auto_promote``, or ``steady promote``)."""
    keep_old: bool = False
    """Blue-green: the old version stays up, out of routing, after the switch."""
    new_count: int | None = None
    """Canary: the new version's replicas the current weight needs (None: the target)."""
    complete: bool = True
    """Canary: the last step is reached."""
    aborted: bool = False
    """Canary: aborted (the steady plan owns the stable version again)."""


class UpdateCounts(NamedTuple):
    launch: int
    """Replicas the update starts."""
    drain: int
    """Replicas it drains and stops."""


class UpdateStrategy:
    """One way to reach a new version. A subclass sets ``mode`` and implements
    :meth:`plan`; the rest are defaults a restart strategy keeps."""

    mode: ClassVar[UpdateMode]
    selectable: ClassVar[bool] = True
    """A user may ask for it (``service.update_mode``, ``steady update --mode``)."""
    restarts: ClassVar[bool] = True
    """It starts new replicas; False: running replicas are relabelled in place."""
    holds: ClassVar[bool] = True
    """``steady pause``/``resume``/``abort`` hold or roll back it by the generic hold."""
    steps: ClassVar[bool] = False
    """It has a step machine of its own that takes every ``steady`` steering command."""
    promotes: ClassVar[bool] = False
    """``steady promote`` applies (a blue-green switch waiting for it)."""
    deadline: ClassVar[bool] = True
    """``update_deadline_s`` applies (a canary's pauses are its own timeline)."""
    doubles: ClassVar[bool] = False
    """It starts the whole target beside the running version: the machine must hold both."""
    heal_event: ClassVar[EventKind] = EventKind.BLUE_GREEN
    heal_when: ClassVar[str] = "before the switch"
    """When the stable version, still serving, replaces what it lost: the event's words."""

    def plan(self, step: UpdateStep) -> Plan:
        raise NotImplementedError

    def plan_lines(
        self, old: str, new: str, target: int, surge: int, unavailable: int
    ) -> list[str]:
        """The update's plan in words, for the dashboard."""
        return [f"{old} -> {new} by {self.mode}"]

    def counts(
        self,
        target: int,
        version: int,
        replicas: Sequence[ReplicaView],
        *,
        max_surge: int = 1,
        max_unavailable: int = 0,
    ) -> UpdateCounts:
        """The replicas an update to ``version`` (``target`` of them) launches and drains
        in all: the strategy's own steps played on a copy of the fleet in which every
        replica started turns READY and none fails, until the plan says done (a canary
        as if its last step were reached at once: its weights change when replicas
        start, not how many). Rather than a formula of its own that could drift from
        what the runtime does. tests/unit/controller/test_dry_run_counts.py checks them
        against what the runtime really launches and drains."""
        live = [r for r in replicas if r.status.is_live]
        fleet = list(live)
        stable = len(live)  # what the stable version heals to: it loses nothing here
        next_id = max((r.id for r in replicas), default=0) + 1
        launched = drained = 0
        for _ in range(4 * (target + len(live)) + 4):  # each step launches or drains one at least
            step = self.plan(
                UpdateStep(
                    target,
                    version,
                    fleet,
                    max_surge=max_surge,
                    max_unavailable=max_unavailable,
                    stable_target=stable,
                )
            )
            if not (step.launch or step.drain):
                break
            gone = {rid for rid, _ in step.drain}
            drained += len(gone)
            # Drained replicas stop; every new replica is READY by the next step.
            fleet = [
                replace(r, status=ReplicaStatus.READY) if r.version == version else r
                for r in fleet
                if r.id not in gone
            ]
            fleet += [
                ReplicaView(next_id + i, version, ReplicaStatus.READY) for i in range(step.launch)
            ]
            next_id += step.launch
            launched += step.launch
            if step.done:  # a canary's last step drains the old version and is done at once
                break
        return UpdateCounts(launched, drained)


STRATEGIES: dict[UpdateMode, UpdateStrategy] = {}
"""Every update strategy, by its mode, in the order users are offered them."""


def register(strategy: UpdateStrategy) -> UpdateStrategy:
    """Make ``strategy`` the one for its mode (its mode becomes a known UpdateMode)."""
    STRATEGIES[UpdateMode.named(strategy.mode)] = strategy
    return strategy


def strategy_of(mode: str) -> UpdateStrategy:
    """The strategy of ``mode``; KeyError for a mode none registered (``initial``)."""
    return STRATEGIES[UpdateMode(mode)]


def selectable_modes() -> tuple[UpdateMode, ...]:
    """The modes a user may ask for, in the registry's order."""
    return tuple(mode for mode, s in STRATEGIES.items() if s.selectable)


@dataclass
class Sides:
    """The live replicas of an update, old (any other version) and new, once the new
    ones beyond the target (it shrank mid-update) are drained, the ones serving
    nobody first."""

    live: list[ReplicaView]
    old: list[ReplicaView]
    new: list[ReplicaView]
    drain: list[tuple[int, str]]
    done: bool
    """Converged: no old replica, and exactly the target of READY new ones."""

    @property
    def new_ready(self) -> list[ReplicaView]:
        return [r for r in self.new if r.status is ReplicaStatus.READY]

    @property
    def old_ready(self) -> list[ReplicaView]:
        return oldest_first(r for r in self.old if r.status is ReplicaStatus.READY)

    @property
    def old_unready(self) -> list[ReplicaView]:
        return oldest_first(r for r in self.old if r.status is not ReplicaStatus.READY)


def sides(target: int, new_version: int, replicas: Sequence[ReplicaView]) -> Sides:
    live = [r for r in replicas if r.status.is_live]
    old = [r for r in live if r.version != new_version]
    new = [r for r in live if r.version == new_version]
    done = not old and len(new) == target and all(r.status is ReplicaStatus.READY for r in new)
    drain: list[tuple[int, str]] = []
    surplus_new = len(new) - target
    if surplus_new > 0:
        order = sorted(new, key=lambda r: (STOP_ORDER[r.status], -r.id))
        drain.extend((r.id, scaled_down(target)) for r in order[:surplus_new])
        gone = {rid for rid, _ in drain}
        new = [r for r in new if r.id not in gone]
    return Sides(live, old, new, drain, done)
