"""Blue-green: the full target of new replicas starts beside the old ones; traffic
stays on the old version until ``target`` new replicas are READY, then all old ones
drain in the same step that routes the new ones.

``switch_allowed=False`` holds the switch (``auto_promote: false`` before
``steady promote``), and ``keep_old`` keeps the old replicas up, out of routing,
after it (``scale_down_delay_s``); the update is not done meanwhile. Until the
switch the old version serves alone, so a replica it loses is replaced with the
stable version (``launch_old``: the old ones back to planner.stable_size), unless
``old_broken``; it is never grown to the new version's target, which only the new
version is launched to. ``room`` caps what starts (new replicas first).
"""

from __future__ import annotations

from steadyserve.core.planner import Plan, oldest_first, stable_size
from steadyserve.core.states import UpdateMode
from steadyserve.core.strategies.base import UpdateStep, UpdateStrategy, sides


class BlueGreen(UpdateStrategy):
    mode = UpdateMode.BLUE_GREEN
    promotes = True
    doubles = True

    def plan(self, step: UpdateStep) -> Plan:
        target = max(0, step.target)
        fleet = sides(target, step.new_version, step.replicas)
        drain, old = fleet.drain, fleet.old
        launch_old = 0
        if old and (len(fleet.new_ready) < target or not step.switch_allowed):
            # Before the switch: the old version serves alone, and heals to its target.
            routable = frozenset(r.id for r in fleet.old_ready)
            if not step.old_broken:
                launch_old = max(0, stable_size(step.stable_target, target) - len(old))
        else:
            # The switch (or after it): one routing change, then the old ones drain
            # (or stay warm, out of routing, while keep_old).
            if not step.keep_old:
                replaced = f"replaced by version {step.new_version} (blue-green switch)"
                drain.extend((r.id, replaced) for r in oldest_first(old))
            routable = frozenset(r.id for r in fleet.new_ready)
        launch = target - len(fleet.new)
        if step.room is not None:
            launch = min(launch, max(0, step.room))
            launch_old = min(launch_old, max(0, step.room - launch))
        return Plan(
            launch=launch,
            drain=tuple(drain),
            routable=routable,
            done=fleet.done,
            launch_old=launch_old,
        )

    def plan_lines(
        self, old: str, new: str, target: int, surge: int, unavailable: int
    ) -> list[str]:
        return [
            f"start {target} replica(s) of {new}; traffic stays on {old}",
            f"when all {target} are ready, switch all traffic to {new} at once",
            f"drain and stop the {old} replicas",
        ]
