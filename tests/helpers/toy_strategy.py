"""A toy update strategy written as a new one would be: Kubernetes' ``Recreate``.
Every old replica drains first; the new version starts once none is left. (A gap
in service: a toy, registered only by the test that shows a strategy plugs in.)"""

from __future__ import annotations

from steadyserve.core.planner import Plan
from steadyserve.core.states import UpdateMode
from steadyserve.core.strategies.base import UpdateStep, UpdateStrategy, sides


class Recreate(UpdateStrategy):
    mode = UpdateMode.named("recreate")

    def plan(self, step: UpdateStep) -> Plan:
        fleet = sides(step.target, step.new_version, step.replicas)
        drain = [*fleet.drain, *((r.id, "recreated") for r in fleet.old)]
        launch = 0 if fleet.old else max(0, step.target - len(fleet.new))
        routable = frozenset(r.id for r in fleet.new_ready)
        return Plan(launch=launch, drain=tuple(drain), routable=routable, done=fleet.done)
