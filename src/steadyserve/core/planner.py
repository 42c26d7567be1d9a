"""What the controller should do next, as pure functions (no I/O, no clocks).

The controller feeds in the target, the replicas it knows (id, version, state)
and whether the version is judged broken; the planner answers one :class:`Plan`
(what to launch, what to drain, what is routable, whether an update is done) and
what the service's status is. The steady state here, and each update strategy's
step (core/strategies/: rolling, blue-green, canary, in place) answer the same
type, so the runtime carries out every plan the same way. Keeping this free of
processes lets the tests walk every case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from steadyserve.core.autoscale.victims import Candidate, choose_victims
from steadyserve.core.states import ReplicaStatus, ServiceStatus

# A failed replica stays listed for debugging; only the most recent few, so a
# service that crashes every minute does not grow an endless list.
KEEP_FAILED = 3

# When scaling down, stop the replicas that serve nobody first.
STOP_ORDER = {
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
) -> Plan:
    """Keep ``target`` live replicas of ``version``; retire replicas of other versions.

    A broken version (its replicas failed before any was ever ready) is not
    relaunched, so a bug does not become a crash loop. ``capacities``: what each
    replica carries under a per-accelerator target; the smaller go first.
    """
    carries = capacities or {}
    live = [r for r in replicas if r.status.is_live]
    current = [r for r in live if r.version == version]
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
    launch = 0 if version_broken else max(0, target - len(current))
    stopping = {rid for rid, _ in stop}
    routable = frozenset(
        r.id for r in live if r.status is ReplicaStatus.READY and r.id not in stopping
    )
    return Plan(
        launch=launch,
        drain=tuple(stop),
        forget=failed_to_forget(replicas, version),
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


def oldest_first(replicas: Iterable[ReplicaView]) -> list[ReplicaView]:
    """The order old replicas drain in: the oldest version first, then the highest id."""
    return sorted(replicas, key=lambda r: (r.version, -r.id))
