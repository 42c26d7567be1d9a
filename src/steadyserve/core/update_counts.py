"""What an update would launch and drain in all: the dry run's counts, asked of the
update's strategy (core/strategies/), which plays its own steps rather than keep a
formula that could drift from what the runtime does."""

from __future__ import annotations

from collections.abc import Sequence

from steadyserve.core.planner import ReplicaView
from steadyserve.core.states import UpdateMode
from steadyserve.core.strategies import UpdateCounts, strategy_of

__all__ = ["UpdateCounts", "update_counts"]


def update_counts(
    mode: UpdateMode,
    target: int,
    version: int,
    replicas: Sequence[ReplicaView],
    *,
    max_surge: int = 1,
    max_unavailable: int = 0,
) -> UpdateCounts:
    """The replicas an update to ``version`` (``target`` of them) launches and drains in all."""
    return strategy_of(mode).counts(
        target, version, replicas, max_surge=max_surge, max_unavailable=max_unavailable
    )
