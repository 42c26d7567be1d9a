"""What the controller should do next, as pure functions (no I/O, no clocks).

The controller feeds in the target, the replicas it knows (id, version, state)
and whether the version is judged broken; the planner answers what to launch,
what to stop, what is routable and what the service's status is. Keeping this
free of processes lets the tests walk every case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from steadyserve.states import ReplicaStatus, ServiceStatus

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


@dataclass(frozen=True)
class Plan:
    launch: int = 0
    stop: tuple[tuple[int, str], ...] = ()
    forget: tuple[int, ...] = ()
    routable: frozenset[int] = field(default_factory=frozenset)


def plan_steady(
    target: int, version: int, replicas: Sequence[ReplicaView], *, version_broken: bool
) -> Plan:
    """Keep ``target`` live replicas of ``version``; retire replicas of other versions.

    A broken version (its replicas failed before any was ever ready) is not
    relaunched, so a bug does not become a crash loop.
    """
    live = [r for r in replicas if r.status.is_live]
    current = [r for r in live if r.version == version]
    stop: list[tuple[int, str]] = [
        (r.id, f"version {r.version} is no longer wanted") for r in live if r.version != version
    ]
    surplus = len(current) - target
    if surplus > 0:
        order = sorted(current, key=lambda r: (_STOP_ORDER[r.status], -r.id))
        stop.extend((r.id, f"scaled down to {target}") for r in order[:surplus])
    launch = 0 if version_broken else max(0, target - len(current))
    stopping = {rid for rid, _ in stop}
    routable = frozenset(
        r.id for r in live if r.status is ReplicaStatus.READY and r.id not in stopping
    )
    failed = sorted((r for r in replicas if r.status.is_failed), key=lambda r: -r.id)
    forget = tuple(
        r.id for i, r in enumerate(failed) if i >= KEEP_FAILED or r.version != version
    )
    return Plan(launch=launch, stop=tuple(stop), forget=forget, routable=routable)


def service_status(
    *,
    shutting_down: bool,
    lb_ready: bool,
    target: int,
    replicas: Sequence[ReplicaView],
    routable: frozenset[int],
    version_broken: bool,
    updating: bool = False,
) -> ServiceStatus:
    """The service's one-word status, as SkyServe reports it."""
    if shutting_down:
        return ServiceStatus.SHUTTING_DOWN
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
