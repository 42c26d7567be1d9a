"""What the controller should do next, as pure functions (no I/O, no clocks).

The controller feeds in the target, the replicas it knows (id, version, state)
and whether the version is judged broken; the planner answers one :class:`Plan`
(what to launch, what to drain, what is routable, whether an update is done) and
what the service's status is. Steady state, a rolling or blue-green step and a
canary step all answer the same type, so the runtime carries out every plan the
same way. Keeping this free of processes lets the tests walk every case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from steadyserve.core.autoscale.victims import Candidate, choose_victims
from steadyserve.core.states import ReplicaStatus, ServiceStatus, UpdateMode

# A failed replica stays listed for debugging; only the most recent few, so a
# service that crashes every minute does not grow an endless list.
KEEP_FAILED = 3

# When scaling down, stop the replicas that serve nobody first.
_STOP_ORDER = {
    ReplicaStatus.PENDING: 0,
    ReplicaStatus.PROVISIONING: 1,
    ReplicaStatus.STARTING: 2,
    ReplicaStatus.NOT_READY: 3,
    ReplicaStatus.READY: 4,
}


@dataclass(frozen=True)
class ReplicaView:
    id: int
    version: int
    status: ReplicaStatus


Drains = tuple[tuple[int, str], ...]
"""``(replica id, reason)`` pairs."""

SCALED_DOWN = "scaled down to"
"""How a drain for a smaller target begins (``scaled down to 2``): a pool swaps a busy
worker so drained for an idle one (controller/pool.py), and only such a drain."""


def scaled_down(target: int) -> str:
    return f"{SCALED_DOWN} {target}"


def is_scale_down(why: str) -> bool:
    return why.startswith(SCALED_DOWN)


@dataclass(frozen=True, init=False)
class Plan:
    """One reconcile step: what the runtime carries out this tick, in this order
    (docs/design.md, "The reconcile tick"): finish, route, drain, forget, launch, heal."""

    launch: int = 0
    """Replicas of the target version to start now."""
    drain: Drains = ()
    """Take out of routing, drain, stop and forget: the one word for a replica leaving
    (retired, scaled down, replaced), whoever decided it."""
    forget: tuple[int, ...] = ()
    """Failed replica rows no longer listed."""
    routable: frozenset[int] = field(default_factory=frozenset)
    """The ids the load balancer may route to."""
    launch_old: int = 0
    """Replicas of the update's stable (from) version to start: it lost some while a
    canary runs or before a blue-green switch, and it still serves."""
    note: str | None = None
    """Why an update's step is smaller than its mode alone would make it (the
    machine's free capacity): recorded once as a CAPACITY event."""
    done: bool = False
    """An update has converged: exactly the target of READY new-version replicas, and
    no live replica of another version."""
    finish: str | None = None
    """The update in flight succeeds with this message (set by the runtime's plan
    step when ``done`` and an update is in flight); None: nothing to finish."""

    def __init__(
        self,
        launch: int = 0,
        drain: Drains = (),
        forget: tuple[int, ...] = (),
        routable: frozenset[int] = frozenset(),
        launch_old: int = 0,
        note: str | None = None,
        done: bool = False,
        finish: str | None = None,
        *,
        stop: Drains = (),
    ) -> None:
        """``stop=`` is taken as ``drain``: the name the rollout's modules
        (controller/rollout.py, canary.py) still build plans with until they move to
        ``drain``. It is no attribute, so a reader of the old name fails at once."""
        values = (launch, (*drain, *stop), forget, routable, launch_old, note, done, finish)
        for name, value in zip(_PLAN_FIELDS, values, strict=True):
            object.__setattr__(self, name, value)


_PLAN_FIELDS = tuple(f.name for f in fields(Plan))


def plan_steady(
    target: int,
    version: int,
    replicas: Sequence[ReplicaView],
    *,
    version_broken: bool,
    capacities: Mapping[int, float] | None = None,
    replace_failed: bool = True,
) -> Plan:
    """Keep ``target`` live replicas of ``version``; retire replicas of other versions.

    A broken version (its replicas failed before any was ever ready) is not
    relaunched, so a bug does not become a crash loop. ``capacities``: what each
    replica carries under a per-accelerator target; the smaller go first.
    ``replace_failed`` False is SkyServe's ``auto_restart: false``: a failed replica
    of ``version`` keeps its place (and its row), so it is not replaced.
    """
    carries = capacities or {}
    live = [r for r in replicas if r.status.is_live]
    current = [r for r in live if r.version == version]
    failed = (
        []
        if replace_failed
        else [r for r in replicas if r.version == version and r.status.is_failed]
    )
    stop: list[tuple[int, str]] = [
        (r.id, f"version {r.version} is no longer wanted") for r in live if r.version != version
    ]
    surplus = len(current) - target
    if surplus > 0:
        # Not-ready first, then the smaller capacity, then the newest (ids are never
        # reused: a higher id is newer).
        candidates = [
            Candidate(r.id, r.status is ReplicaStatus.READY, r.id, carries.get(r.id, 0.0))
            for r in current
        ]
        stop.extend((rid, scaled_down(target)) for rid in choose_victims(candidates, surplus))
    launch = 0 if version_broken else max(0, target - len(current) - len(failed))
    stopping = {rid for rid, _ in stop}
    routable = frozenset(
        r.id for r in live if r.status is ReplicaStatus.READY and r.id not in stopping
    )
    kept = {r.id for r in failed}  # forgotten, a failed replica would be replaced
    return Plan(
        launch=launch,
        drain=tuple(stop),
        forget=tuple(rid for rid in failed_to_forget(replicas, version) if rid not in kept),
        routable=routable,
    )


def failed_to_forget(
    replicas: Sequence[ReplicaView], version: int, *, updating: bool = False
) -> tuple[int, ...]:
    """The failed replica rows no longer listed, so that a crash loop cannot grow
    the list without bound: the newest ``KEEP_FAILED`` of ``version`` stay (why
    it fails), and, during an update, the newest ``KEEP_FAILED`` of each other
    version too (a stable replica replaced mid-canary is worth seeing); outside
    an update other versions' failed rows go."""
    kept: dict[int, int] = {}
    forget: list[int] = []
    for r in sorted((r for r in replicas if r.status.is_failed), key=lambda r: -r.id):
        if r.version != version and not updating:
            forget.append(r.id)
            continue
        kept[r.version] = kept.get(r.version, 0) + 1
        if kept[r.version] > KEEP_FAILED:
            forget.append(r.id)
    return tuple(forget)


def service_status(
    *,
    shutting_down: bool,
    lb_ready: bool,
    target: int,
    replicas: Sequence[ReplicaView],
    routable: frozenset[int],
    version_broken: bool,
    updating: bool = False,
    lb_failed: bool = False,
) -> ServiceStatus:
    """The service's one-word status, as SkyServe reports it. ``lb_failed``: its
    load balancer cannot start (controller/lb_process.py), so nothing can serve."""
    if shutting_down:
        return ServiceStatus.SHUTTING_DOWN
    if lb_failed:
        return ServiceStatus.FAILED
    if not lb_ready:
        return ServiceStatus.CONTROLLER_INIT
    if updating:
        return ServiceStatus.UPDATING
    if routable:
        return ServiceStatus.READY
    if version_broken:
        return ServiceStatus.FAILED
    if target == 0 or not any(r.status.is_live for r in replicas):
        return ServiceStatus.NO_REPLICA
    return ServiceStatus.REPLICA_INIT


def status_reason(
    status: ServiceStatus, lb_failure: str | None, version: int, ready: int, target: int
) -> str:
    """Why the service has the status it just took, for its event."""
    if status is ServiceStatus.FAILED and lb_failure is not None:
        return lb_failure
    if status is ServiceStatus.FAILED:
        return f"version {version} failed before any replica was ready"
    return f"{ready} ready of {target} wanted"


# ------------------------------------------------------------------------ updates


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
    """The next step from the live replicas of any version to ``target`` of ``new_version``.

    Stateless: the controller calls it every tick with the replicas as they are
    now, and what it drains leaves the live states (SHUTTING_DOWN), so a replica
    is drained once and never routed again. Every replica of another version is
    old, whatever its version; SHUTTING_DOWN and failed replicas are ignored.

    *rolling* (Kubernetes' arithmetic): live replicas stay within
    ``target + max_surge``; READY replicas of every version are routed and stay
    at least ``target - max_unavailable`` (unless already fewer: then none is
    drained). *blue_green*: the full target of new replicas is started; traffic
    stays on the old ones until ``target`` new replicas are READY, then all old
    ones drain in the same step that routes the new ones. Blue-green only:
    ``switch_allowed=False`` holds the switch (``auto_promote: false`` before
    ``steady promote``), and ``keep_old`` keeps the old replicas up, out of
    routing, after it (``scale_down_delay_s``); the update is not done meanwhile.
    Until the switch the old version serves alone, so a replica it loses is
    replaced with the stable version (``launch_old``: the old ones back to
    :func:`stable_size`), unless ``old_broken``; it is never grown to the new
    version's target, which only the new version is launched to.

    ``room`` is how many more new-version replicas the machine can give their
    resources now (core/capacity.py ``room``; None: no limit). Nothing is launched
    beyond it, and a rolling update's surge is only what fits: on a full machine
    the surge is 0, so one old replica drains and stops before each new one
    starts (``note`` says so).
    """
    target = max(0, target)
    max_surge = max(0, max_surge)
    max_unavailable = max(0, max_unavailable)
    live = [r for r in replicas if r.status.is_live]
    note = None
    if room is not None and mode != "blue_green":
        # Live replicas hold their devices; only ``room`` more can be had.
        fits = max(0, len(live) + max(0, room) - target)
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

    old = [r for r in live if r.version != new_version]
    new = [r for r in live if r.version == new_version]
    done = not old and len(new) == target and all(r.status is ReplicaStatus.READY for r in new)
    drain: list[tuple[int, str]] = []

    # New replicas beyond the target (it shrank mid-update): the ones serving nobody first.
    surplus_new = len(new) - target
    if surplus_new > 0:
        order = sorted(new, key=lambda r: (_STOP_ORDER[r.status], -r.id))
        drain.extend((r.id, scaled_down(target)) for r in order[:surplus_new])
        gone = {rid for rid, _ in drain}
        new = [r for r in new if r.id not in gone]
    new_ready = [r for r in new if r.status is ReplicaStatus.READY]
    old_ready = _oldest_first(r for r in old if r.status is ReplicaStatus.READY)
    old_unready = _oldest_first(r for r in old if r.status is not ReplicaStatus.READY)
    replaced = f"replaced by version {new_version}"

    if mode == "blue_green":
        launch_old = 0
        if old and (len(new_ready) < target or not switch_allowed):
            # Before the switch: the old version serves alone, and heals to its target.
            routable = frozenset(r.id for r in old_ready)
            launch_old = 0 if old_broken else max(0, stable_size(stable_target, target) - len(old))
        else:
            # The switch (or after it): one routing change, then the old ones drain
            # (or stay warm, out of routing, while keep_old).
            if not keep_old:
                drain.extend((r.id, f"{replaced} (blue-green switch)") for r in _oldest_first(old))
            routable = frozenset(r.id for r in new_ready)
        launch = target - len(new)
        if room is not None:
            launch = min(launch, max(0, room))
            launch_old = min(launch_old, max(0, room - launch))
        return Plan(
            launch=launch,
            drain=tuple(drain),
            routable=routable,
            done=done,
            launch_old=launch_old,
            note=note,
        )

    # Rolling: an old replica lost makes room that new replicas fill; no old launches.
    # Old replicas that are not READY give no capacity: they go first.
    drain.extend((r.id, f"{replaced} (not ready)") for r in old_unready)
    # READY old ones drain while READY capacity stays >= target - max_unavailable;
    # that is the rule of docs/design.md, "Update modes": ready old + new beyond the target drain.
    min_ready = max(0, target - max_unavailable)
    ready_total = len(old_ready) + len(new_ready)
    ready_drains = min(len(old_ready), max(0, ready_total - min_ready))
    drain.extend((r.id, replaced) for r in old_ready[:ready_drains])
    # Launch into the room the surge allows (after this step's drains), never
    # beyond the target of new replicas.
    live_after = len(live) - len(drain)
    launch = max(0, min(target - len(new), target + max_surge - live_after))
    if room is not None:
        launch = min(launch, max(0, room))  # drained replicas hold theirs until stopped
    routable = frozenset(r.id for r in [*old_ready[ready_drains:], *new_ready])
    return Plan(launch=launch, drain=tuple(drain), routable=routable, done=done, note=note)


def stable_size(stable_target: int | None, target: int) -> int:
    """The size the stable version heals to while a blue-green or canary update runs:
    what it had when the update started (``stable_target``), or the target if that
    is smaller (autoscaling shrank it). Never the new version's larger target: on a
    machine whose accelerators are all in use, growing the old version first would
    leave no room for the new one (SkyServe keeps the old version at its size).
    ``None`` (an update recorded before this was kept) means the target."""
    if stable_target is None:
        return max(0, target)
    return max(0, min(stable_target, target))


def _oldest_first(replicas: Iterable[ReplicaView]) -> list[ReplicaView]:
    """The order old replicas drain in: the oldest version first, then the highest id."""
    return sorted(replicas, key=lambda r: (r.version, -r.id))


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
        order = sorted(new, key=lambda r: (_STOP_ORDER[r.status], -r.id))
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
        old_ready = _oldest_first(r for r in old if r.status is ReplicaStatus.READY)
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
        drain.extend((r.id, replaced) for r in _oldest_first(old))
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
