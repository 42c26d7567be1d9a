"""In place: the running replicas are relabelled as the new version and take the
change where they run (``user_config`` delivered, controller/rollout/in_place.py);
none restarts. Chosen by the change itself (spec/changes.py), never asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from steadyserve.core.planner import Plan, ReplicaView, plan_steady
from steadyserve.core.states import UpdateMode
from steadyserve.core.strategies.base import UpdateCounts, UpdateStep, UpdateStrategy


class InPlace(UpdateStrategy):
    mode = UpdateMode.IN_PLACE
    selectable = False
    restarts = False
    holds = False

    def plan(self, step: UpdateStep) -> Plan:
        """The relabelled replicas sized to the target at once, as the steady plan does."""
        relabelled = [
            replace(r, version=step.new_version) for r in step.replicas if r.status.is_live
        ]
        return plan_steady(step.target, step.new_version, relabelled, version_broken=False)

    def counts(
        self,
        target: int,
        version: int,
        replicas: Sequence[ReplicaView],
        *,
        max_surge: int = 1,
        max_unavailable: int = 0,
    ) -> UpdateCounts:
        plan = self.plan(UpdateStep(target, version, replicas))
        return UpdateCounts(plan.launch, len(plan.drain))

    def plan_lines(
        self, old: str, new: str, target: int, surge: int, unavailable: int
    ) -> list[str]:
        return [f"{old} -> {new} in place: running replicas are relabelled, none restart"]
