"""Rolling: new replicas replace old ones a few at a time, Kubernetes' arithmetic.

Live replicas stay within ``target + max_surge``; READY replicas of every version
are routed and stay at least ``target - max_unavailable`` (unless already fewer:
then none is drained). Worked example, target 4, max_surge 1, max_unavailable 0,
four old READY: one new starts (5 live); when it is READY, 5 READY >= 4, so one
old drains, and one more new starts; and so on, four times.

``room`` is how many more new-version replicas the machine can give their
resources now (core/capacity.py ``room``; None: no limit). Nothing is launched
beyond it, and the surge is only what fits: on a full machine the surge is 0, so
one old replica drains and stops before each new one starts (``note`` says so).
"""

from __future__ import annotations

from steadyserve.core.planner import Plan
from steadyserve.core.states import UpdateMode
from steadyserve.core.strategies.base import UpdateStep, UpdateStrategy, sides


class Rolling(UpdateStrategy):
    mode = UpdateMode.ROLLING

    def plan(self, step: UpdateStep) -> Plan:
        target = max(0, step.target)
        max_surge = max(0, step.max_surge)
        max_unavailable = max(0, step.max_unavailable)
        fleet = sides(target, step.new_version, step.replicas)
        note = None
        if step.room is not None:
            # Live replicas hold their devices; only ``room`` more can be had.
            fits = max(0, len(fleet.live) + max(0, step.room) - target)
            if fits < max_surge:
                max_surge = fits
                note = (
                    "no room on this machine for a surge: each old replica drains and stops"
                    " before a new one starts"
                    if fits == 0
                    else f"surge limited to {fits} by this machine's free capacity"
                )
        if max_surge == 0 and max_unavailable == 0 and target > 0:
            max_unavailable = 1  # as in Kubernetes (and ServiceSection): or nothing could move
        drain = fleet.drain
        new_ready, old_ready = fleet.new_ready, fleet.old_ready
        replaced = f"replaced by version {step.new_version}"
        # An old replica lost makes room that new replicas fill; no old launches.
        # Old replicas that are not READY give no capacity: they go first.
        drain.extend((r.id, f"{replaced} (not ready)") for r in fleet.old_unready)
        # READY old ones drain while READY capacity stays >= target - max_unavailable;
        # that is the rule of docs/design.md, "Update modes": ready old + new beyond
        # the target drain.
        min_ready = max(0, target - max_unavailable)
        ready_total = len(old_ready) + len(new_ready)
        ready_drains = min(len(old_ready), max(0, ready_total - min_ready))
        drain.extend((r.id, replaced) for r in old_ready[:ready_drains])
        # Launch into the room the surge allows (after this step's drains), never
        # beyond the target of new replicas.
        live_after = len(fleet.live) - len(drain)
        launch = max(0, min(target - len(fleet.new), target + max_surge - live_after))
        if step.room is not None:
            launch = min(launch, max(0, step.room))  # drained replicas hold theirs until stopped
        routable = frozenset(r.id for r in [*old_ready[ready_drains:], *new_ready])
        return Plan(
            launch=launch, drain=tuple(drain), routable=routable, done=fleet.done, note=note
        )

    def plan_lines(
        self, old: str, new: str, target: int, surge: int, unavailable: int
    ) -> list[str]:
        return [
            f"start up to {surge} replica(s) of {new} ahead of stopping {old} ones",
            f"keep at least {target - unavailable} of {target} replicas ready throughout",
            f"traffic goes to every ready replica of {old} and {new}",
            f"drain and stop {old} replicas as {new} replicas become ready",
        ]
