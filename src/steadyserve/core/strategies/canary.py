"""Canary: a few replicas of the new version take a share of the traffic by weight,
step by step (core/canary/steps.py, driven by controller/rollout/canary.py), while the
stable version keeps every replica it has; the last step drains the old version.

The step machine is the canary's own: its steps (weights, pauses, analysis) may grow
new kinds without this plan changing, as long as each says how many new replicas it
needs (``new_count``), whether it is the last (``complete``) or ``aborted``.
"""

from __future__ import annotations

from collections.abc import Sequence

from steadyserve.core.planner import STOP_ORDER, Plan, ReplicaView, oldest_first, stable_size
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode
from steadyserve.core.strategies.base import UpdateStep, UpdateStrategy
from steadyserve.core.strategies.rolling import Rolling


class Canary(UpdateStrategy):
    mode = UpdateMode.CANARY
    holds = False
    steps = True
    deadline = False
    heal_event = EventKind.CANARY_STEP
    heal_when = "during the canary"

    def plan(self, step: UpdateStep) -> Plan:
        return plan_canary(
            step.target,
            step.new_version,
            step.replicas,
            new_count=step.target if step.new_count is None else step.new_count,
            complete=step.complete,
            aborted=step.aborted,
            old_broken=step.old_broken,
            stable_target=step.stable_target,
            room=step.room,
        )

    def plan_lines(
        self, old: str, new: str, target: int, surge: int, unavailable: int
    ) -> list[str]:
        # The dashboard has shown a canary's plan in the rolling words so far.
        return Rolling().plan_lines(old, new, target, surge, unavailable)


def plan_canary(
    target: int,
    new_version: int,
    replicas: Sequence[ReplicaView],
    *,
    new_count: int,
    complete: bool,
    aborted: bool = False,
    old_broken: bool = False,
    stable_target: int | None = None,
    room: int | None = None,
) -> Plan:
    """One step of a canary update (the weights themselves go in the route table).

    The new version runs ``new_count`` replicas (what the current weight needs,
    controller/rollout/canary.py sizes it); the old version keeps every replica it has
    until the canary is ``complete`` and ``target`` new replicas are READY, so
    the stable version never drops below its target by the canary's doing, and
    an abort needs no launch. A stable replica that fails meanwhile is replaced
    with the stable version (``launch_old``: live old replicas plus these
    launches make :func:`stable_size` again, never more), as a Kubernetes stable ReplicaSet heals
    during an Argo Rollouts canary; not once the canary is ``complete`` (the old
    version is about to drain) or ``aborted`` (the steady plan owns it again),
    and not if the old version is ``old_broken``. Every READY replica is
    routable: the weights decide who gets what.

    ``room`` (how many more replicas fit now; None: no limit) caps what starts.
    A canary replica that does not fit takes a stable one's place by the rolling
    rule on a full machine: one stable replica drains and stops, then the canary
    replica starts, one at a time (never while a stable replica is still
    stopping or a new one is not READY yet), and the stable version keeps at
    least one replica until the canary is complete (or needs the whole target).
    The stable version heals only into what is left.
    """
    target = max(0, target)
    live = [r for r in replicas if r.status.is_live]
    old = [r for r in live if r.version != new_version]
    new = [r for r in live if r.version == new_version]
    wanted = target if complete else min(max(0, new_count), target)
    drain: list[tuple[int, str]] = []
    surplus = len(new) - wanted
    if surplus > 0:
        order = sorted(new, key=lambda r: (STOP_ORDER[r.status], -r.id))
        drain.extend((r.id, f"canary needs {wanted} replicas") for r in order[:surplus])
        gone = {rid for rid, _ in drain}
        new = [r for r in new if r.id not in gone]
    new_ready = [r for r in new if r.status is ReplicaStatus.READY]
    launch = max(0, wanted - len(new))
    note = None
    if room is not None and launch > room:
        short = launch - max(0, room)
        launch = max(0, room)
        stopping = any(
            r.status is ReplicaStatus.SHUTTING_DOWN and r.version != new_version for r in replicas
        )
        settled = len(new_ready) == len(new)
        old_ready = oldest_first(r for r in old if r.status is ReplicaStatus.READY)
        keep = 0 if complete or wanted >= target else 1  # the canary is the whole target
        if short > 0 and not stopping and settled and len(old_ready) > keep and launch == 0:
            victim = old_ready[0]
            drain.append((victim.id, f"its place goes to a version {new_version} canary replica"))
            old = [r for r in old if r.id != victim.id]
            note = (
                "no room on this machine for the canary's replicas: each takes a stable"
                " replica's place (drained and stopped first)"
            )
    if complete and len(new_ready) >= target and old:
        replaced = f"replaced by version {new_version} (canary complete)"
        drain.extend((r.id, replaced) for r in oldest_first(old))
        old = []
    routable = frozenset(r.id for r in [*old, *new_ready] if r.status is ReplicaStatus.READY)
    done = complete and not old and len(new) == target and len(new_ready) == target
    heals = not (complete or aborted or old_broken)
    launch_old = max(0, stable_size(stable_target, target) - len(old)) if heals else 0
    if room is not None:
        launch_old = min(launch_old, max(0, room - launch))
        if note is not None:
            launch_old = 0  # the place it gave up is the canary's
    return Plan(
        launch=launch,
        drain=tuple(drain),
        routable=routable,
        done=done,
        launch_old=launch_old,
        note=note,
    )
