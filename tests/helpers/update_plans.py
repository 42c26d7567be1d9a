"""The update planners called with keywords, as the planner tests write a step: the
strategy of the mode (core/strategies/) plans one UpdateStep."""

from __future__ import annotations

from collections.abc import Sequence

from steadyserve.core.planner import Plan, ReplicaView
from steadyserve.core.states import UpdateMode
from steadyserve.core.strategies import UpdateStep, strategy_of
from steadyserve.core.strategies.canary import plan_canary

__all__ = ["plan_canary", "plan_update"]


def plan_update(
    mode: UpdateMode,
    target: int,
    new_version: int,
    replicas: Sequence[ReplicaView],
    *,
    max_surge: int,
    max_unavailable: int,
    switch_allowed: bool = True,
    keep_old: bool = False,
    old_broken: bool = False,
    stable_target: int | None = None,
    room: int | None = None,
) -> Plan:
    """One step of a rolling or blue-green update, by the mode's strategy."""
    return strategy_of(mode).plan(
        UpdateStep(
            target,
            new_version,
            replicas,
            max_surge=max_surge,
            max_unavailable=max_unavailable,
            switch_allowed=switch_allowed,
            keep_old=keep_old,
            old_broken=old_broken,
            stable_target=stable_target,
            room=room,
        )
    )
