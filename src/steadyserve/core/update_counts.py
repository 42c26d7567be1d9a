"""What an update would launch and drain in all: the dry run's counts, asked of the planner.

``steady update --dry-run`` (and every plan an update answers) says how many
replicas the update starts and how many it takes away. Rather than a formula of
its own that could drift from what the runtime does, it plays the planner's own
steps (core/planner.py) on a copy of the fleet in which every replica started
turns READY and none fails, until the planner says the update is done: the
counts of an update that goes as planned. tests/unit/controller/test_dry_run_counts.py
checks them against what the runtime really launches and drains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from steadyserve.core.planner import Plan, ReplicaView, plan_canary, plan_steady, plan_update
from steadyserve.core.states import ReplicaStatus, UpdateMode


class UpdateCounts(NamedTuple):
    launch: int
    """Replicas the update starts."""
    drain: int
    """Replicas it drains and stops."""


def update_counts(
    mode: UpdateMode,
    target: int,
    version: int,
    replicas: Sequence[ReplicaView],
    *,
    max_surge: int = 1,
    max_unavailable: int = 0,
) -> UpdateCounts:
    """The replicas an update to ``version`` (``target`` of them) launches and drains in all.

    In place, the running replicas are relabelled as ``version`` and the steady
    plan sizes them to the target at once. A restart update (rolling, blue-green,
    canary) is played step by step: a canary as if its last step were reached at
    once, as its weights change when replicas start, not how many.
    """
    live = [r for r in replicas if r.status.is_live]
    if mode is UpdateMode.IN_PLACE:
        relabelled = [replace(r, version=version) for r in live]
        plan = plan_steady(target, version, relabelled, version_broken=False)
        return UpdateCounts(plan.launch, len(plan.drain))
    fleet = list(live)
    stable = len(live)  # what the stable version heals to: it loses nothing here
    next_id = max((r.id for r in replicas), default=0) + 1
    launched = drained = 0
    for _ in range(4 * (target + len(live)) + 4):  # each step launches or drains one at least
        step = _step(mode, target, version, fleet, stable, max_surge, max_unavailable)
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


def _step(
    mode: UpdateMode,
    target: int,
    version: int,
    fleet: Sequence[ReplicaView],
    stable: int,
    max_surge: int,
    max_unavailable: int,
) -> Plan:
    if mode is UpdateMode.CANARY:
        return plan_canary(
            target, version, fleet, new_count=target, complete=True, stable_target=stable
        )
    return plan_update(
        UpdateMode.BLUE_GREEN if mode is UpdateMode.BLUE_GREEN else UpdateMode.ROLLING,
        target,
        version,
        fleet,
        max_surge=max_surge,
        max_unavailable=max_unavailable,
        stable_target=stable,
    )
