"""The canary's invariants, ``shadow`` and ``analysis``, checked after every step.

The sim knows what the controller can only measure: how each version answers
(sim/answers.py), so which share of a shadow step's compared answers must count
as differing, and every answer the load balancers compared. The checks hold the
controller's decisions to that:

``shadow``
  - a canary of a version whose answers clearly differ above the configured
    ``max_shadow_diff_rate`` never gets client weight (it aborts before its next
    weight step) and never ends SUCCEEDED, unless ``steady promote`` walked past
    its verdict (the user's word);
  - the counts a shadow verdict is taken on start from a point of the new
    version's own counts: the base is never more than its load balancers compared
    (a base kept from another version hides this one's answers);
  - no client request reaches the shadow step's target: a table that mirrors to a
    version gives it weight 0, and no client request is answered by the version the
    load balancer's table mirrors to (a mirrored copy's answer is compared, never
    sent to a client).

``analysis``
  - a failed verdict (the analysis' or the shadow step's, as the controller
    records it) aborts the canary in the tick that judged it: its update ends
    FAILED with the service back on the stable version; and once the load
    balancer has a table published after that, no client request is routed to
    the aborted version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from steadyserve.controller.rollout.canary import shadow_limits_of
from steadyserve.core.states import ReplicaStatus
from steadyserve.sim.answers import Nature, differing_share

if TYPE_CHECKING:
    from steadyserve.controller.runtime import ServiceRuntime
    from steadyserve.sim.runner import Run
    from steadyserve.sim.traffic import Outcome

CLEAR_SHARE = 0.95
"""A share this high differs in (nearly) every compared answer: a verdict on any
number of them sees it above a limit of at most ``CLEAR_LIMIT``."""
CLEAR_LIMIT = 0.5
HALF_SHARE, HALF_LIMIT, HALF_MIN = 0.5, 0.2, 20
"""Half the answers differing, judged on at least 20 of them, is above 0.2 (the
scramble of sim/answers.py spreads them evenly; chance could not hide it)."""


@dataclass
class Followed:
    """One canary update's target version (an in-place change joining the update
    makes another) as the checks follow it."""

    update_id: int
    version: int
    share: float
    """The share of its compared answers a correct verdict counts as differing."""
    must_fail: bool
    """It has a shadow step and its share is clearly above the configured limit."""
    ended: bool = False
    noise_learned: bool = False


@dataclass
class CanaryWatch:
    """What the canary checks remember between steps."""

    followed: dict[tuple[int, int], Followed] = field(default_factory=dict)
    promoted: set[int] = field(default_factory=set)
    """Canary updates a ``steady promote`` walked on (past any verdict)."""
    in_flight: int | None = None
    """The update id of the canary active at the last check."""
    aborted: dict[int, tuple[ServiceRuntime, int]] = field(default_factory=dict)
    """Version aborted by a failed verdict -> the runtime and its table version then."""

    def restored(self, updates: int, versions: int) -> None:
        """A state restored from its backup hands out the update ids and version numbers
        it lost again: what was followed under them is another canary's."""
        self.followed = {k: f for k, f in self.followed.items() if k[0] <= updates}
        self.promoted = {u for u in self.promoted if u <= updates}
        self.aborted = {v: a for v, a in self.aborted.items() if v <= versions}
        self.in_flight = None


def after_step(run: Run, out: Outcome) -> None:
    watch: CanaryWatch = run.canaries
    rt = run.runtime
    _answers(run, out)
    _verdicts(run)
    _aborted_unrouted(run, out)
    watch.in_flight = None
    if rt is not None and rt.canary.active and rt.canary.state is not None:
        _follow(run, rt)
    _ends(run)


def _nature(run: Run, version: int) -> Nature:
    row = run.watch.db.execute(
        "SELECT spec_json FROM versions WHERE service='svc' AND version=?", (version,)
    ).fetchone()
    return Nature() if row is None else Nature.of(str(json.loads(row[0]).get("run") or ""))


def _followed(run: Run, rt: ServiceRuntime) -> Followed:
    update = rt.rollout.update
    assert update is not None and update.id is not None
    key = (update.id, update.to_version)
    found = run.canaries.followed.get(key)
    if found is not None:
        return found
    canary = rt.spec.service.canary
    limits = shadow_limits_of(rt)
    new = _nature(run, update.to_version)
    # Every version the clients' answers may come from (and so be compared with).
    stable = {update.from_version} | {
        r.version
        for r in rt.replicas.values()
        if r.status is ReplicaStatus.READY and r.version != update.to_version
    }
    ignore = tuple(canary.shadow.ignore)
    share = min(
        differing_share(_nature(run, v), new, ignore, limits.learn_noise) for v in sorted(stable)
    )
    limit = limits.max_diff_rate
    must_fail = (
        any(s.shadow is not None for s in canary.steps)
        and limit is not None
        and (
            (share >= CLEAR_SHARE and limit <= CLEAR_LIMIT)
            or (share >= HALF_SHARE and limit <= HALF_LIMIT and limits.min_compared >= HALF_MIN)
        )
    )
    found = run.canaries.followed[key] = Followed(update.id, update.to_version, share, must_fail)
    return found


def _follow(run: Run, rt: ServiceRuntime) -> None:
    update, state = rt.rollout.update, rt.canary.state
    assert update is not None and update.id is not None and state is not None
    run.canaries.in_flight = update.id
    followed = _followed(run, rt)
    if followed.must_fail and update.id not in run.canaries.promoted and state.weight > 0:
        limit = shadow_limits_of(rt).max_diff_rate
        run._violate(
            "shadow",
            f"version {update.to_version}, whose answers differ ({followed.share:.0%} of "
            f"them, max_shadow_diff_rate {limit}), got client weight {state.weight}",
        )
    base = rt.canary.shadow_base
    if base is not None and state.mirror:
        own = run.lb.shadow(update.to_version)
        if (
            base.compared > own.compared
            or base.mirrored > own.mirrored
            or base.dropped > own.dropped
            or base.noise_pairs > own.noise_pairs
        ):
            run._violate(
                "shadow",
                f"the shadow verdict of version {update.to_version} counts from a base that "
                f"is not its own: {base.mirrored} mirrored, {base.dropped} dropped, "
                f"{base.compared} compared, {base.noise_pairs} noise pairs; its load "
                f"balancers mirrored {own.mirrored}, dropped {own.dropped}, compared "
                f"{own.compared}, {own.noise_pairs} noise pairs",
            )
    verdict = rt.canary.shadow_verdict
    if verdict is not None and verdict.noise and not followed.noise_learned:
        followed.noise_learned = True
        _count(run, "shadow noise learned")


def _answers(run: Run, out: Outcome) -> None:
    """No client request reaches the shadow step's target."""
    rt = run.runtime
    table = None if rt is None else rt.routes.table
    mirror = None if table is None else table.get("mirror")
    if table is not None and isinstance(mirror, dict):
        weight = (table.get("weights") or {}).get(str(mirror.get("version")), 0)
        if weight:
            run._violate(
                "shadow",
                f"the controller's table mirrors to version {mirror.get('version')} and "
                f"gives it client weight {weight}",
            )
            return
    for version, rid, target in out.answered:
        if version == target:
            run._violate(
                "shadow",
                f"a client request was answered by replica {rid} of version {version}, "
                "which the load balancer's table mirrors to at weight 0",
            )
            return


def _verdicts(run: Run) -> None:
    """A failed verdict recorded in this step aborted its canary in the same tick."""
    for reason in run.watch.verdicts():
        run.result.trace.append(f"  verdict {reason[:160]}")
        outcome = reason.split(":", 1)[0]
        _count(run, f"analysis {outcome}" if " " not in outcome else outcome)
        if outcome not in ("failed", "shadow failed"):
            continue
        update_id = run.canaries.in_flight
        if update_id is None:
            continue  # judged in the step the canary began: nothing followed it yet
        status, from_version, to_version = run.watch.db.execute(
            "SELECT status, from_version, to_version FROM updates WHERE id=?", (update_id,)
        ).fetchone()
        found = run.watch.db.execute(
            "SELECT outcome FROM versions WHERE service='svc' AND version=?", (to_version,)
        ).fetchone()
        version_outcome = None if found is None else str(found[0])
        newer = (run.watch.latest_update() or (0, "", 0))[0] > update_id
        back = newer or run.watch.service_version() == from_version
        if status != "FAILED" or version_outcome != "failed" or not back:
            run._violate(
                "analysis",
                f"a {outcome} verdict ({reason[:120]}) left the canary of version "
                f"{to_version} {status} (version outcome {version_outcome!r}, service "
                f"version {run.watch.service_version()}): it must abort at once, back on "
                f"version {from_version}",
            )
            return
        _count(run, "canary aborted by a failed verdict")
        rt = run.runtime
        if rt is not None:
            run.canaries.aborted[to_version] = (rt, rt.routes.version)


def _aborted_unrouted(run: Run, out: Outcome) -> None:
    """Once the load balancer has a table published after the abort, no client
    request goes to the aborted version."""
    rt = run.runtime
    if rt is None or not run.canaries.aborted or run.lb.known != rt.routes.token:
        return
    for rid, _ in out.routed:
        known = run.lb.balancer.known.get(rid)
        if known is None or known.version not in run.canaries.aborted:
            continue
        then, table = run.canaries.aborted[known.version]
        if then is not rt or rt.routes.version > table:
            run._violate(
                "analysis",
                f"a client request was routed to replica {rid} of version {known.version}, "
                "whose canary a failed verdict aborted",
            )
            return


def _ends(run: Run) -> None:
    """A canary that must fail its shadow step never ends SUCCEEDED (unless promoted)."""
    for followed in run.canaries.followed.values():
        if followed.ended:
            continue
        status = run.watch.updates.get(followed.update_id)
        if status is None or status == "IN_PROGRESS":
            continue
        followed.ended = True
        if (
            status == "SUCCEEDED"
            and followed.must_fail
            and followed.update_id not in run.canaries.promoted
        ):
            run._violate(
                "shadow",
                f"the canary of version {followed.version}, whose answers differ "
                f"({followed.share:.0%} of them), SUCCEEDED without steady promote",
            )


def _count(run: Run, what: str) -> None:
    """What the canaries of a run did (``run`` prints the totals: the coverage)."""
    run.result.canary[what] = run.result.canary.get(what, 0) + 1
