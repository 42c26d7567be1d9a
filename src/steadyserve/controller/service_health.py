"""What one reconcile pass reports about its service: the service's status (from
the pure ``core/planner.service_status``) and the route table it publishes.

The runtime (runtime.py) decides and applies the plan; these read the plan and the
replicas and write only the status row and the published table, so the runtime's
loop stays about what runs and this about what it shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from steadyserve.controller.load import CountTarget, read_info
from steadyserve.controller.routing import route_table
from steadyserve.core.planner import service_status, status_reason
from steadyserve.core.states import ReplicaStatus
from steadyserve.wire.routes import DOCS_PATH_QUERY as DOCS_PATH_FIELD

if TYPE_CHECKING:
    from steadyserve.controller.runtime import ServiceRuntime, Tick
    from steadyserve.store import ReplicaRow


def update_status(rt: ServiceRuntime, tick: Tick) -> None:
    """Move the service's status when this tick's plan changes it (one event row)."""
    plan = tick.plan
    status = service_status(
        shutting_down=rt.stopping,
        lb_ready=rt.lb_ready(),
        target=rt.target_replicas(),
        replicas=rt.views(),
        routable=plan.routable,
        version_broken=rt.row.version in rt.broken_versions,
        updating=rt.updating and bool(plan.routable),
        lb_failed=rt.lb.failure is not None,
    )
    if status is not rt.row.status:
        old = rt.row.status
        rt.row.status = status
        why = status_reason(status, rt.lb.failure, rt.row.version, len(plan.routable), tick.target)
        rt.store.set_service_status(rt.name, old, status, why)


def publish(rt: ServiceRuntime, routable: frozenset[int]) -> None:
    """Publish the route table of ``routable`` with the canary's weights and mirror."""
    routable, weights, preview = rt.canary.route_fields(routable)
    replicas = sorted(rt.replicas.values(), key=lambda r: r.id)
    table = route_table(
        rt.spec,
        replicas,
        routable,
        hold_at_zero=rt.autoscaler.allows_zero,
        weights=weights,
        preview=preview,
        models=rt.models.models,
        mirror=rt.canary.mirror(),
    )
    rt.routes.publish(table.to_json())


def live_of_target(rt: ServiceRuntime) -> int:
    """Live replicas of the target version (what the autoscaler starts from)."""
    return sum(1 for r in rt.replicas.values() if r.status.is_live and r.version == rt.row.version)


def _info_target(rt: ServiceRuntime, replica: ReplicaRow) -> CountTarget:
    """Where a Python replica's ``/-/info`` is read (it has a control port)."""
    assert replica.control_port is not None
    return CountTarget(
        replica.id,
        replica.ip,
        replica.control_port,
        rt.environment.control_headers(replica),
        replica.netns,
    )


def count_targets(rt: ServiceRuntime) -> list[CountTarget]:
    """Python replicas whose ``/-/info`` is read: for the ongoing-requests policy's
    own counts, and for the models multiplexed ones hold."""
    ongoing = rt.autoscaler.policy_name == "ongoing_requests"
    rt.models.keep(rt.replicas)
    return [
        _info_target(rt, r)
        for r in rt.replicas.values()
        if r.control_port is not None
        and r.status is ReplicaStatus.READY
        and (ongoing or rt.models.wanted(r.id))
    ]


async def learn_models(rt: ServiceRuntime, replica: ReplicaRow) -> None:
    """Read a Python replica's ``/-/info`` once as its probe passes, before it turns
    READY: the first route table that lists it then says whether it is multiplexed
    and which models it holds, so the LB never routes a model's request by the
    policy alone while the once-a-second read (load.py) has not come round yet."""
    if replica.control_port is None or not rt.models.wanted(replica.id):
        return
    target = _info_target(rt, replica)
    info = await read_info(rt.probe_session, target)
    if info is not None:
        rt.models.seen(replica.id, info)


async def docs_path(rt: ServiceRuntime) -> str | None:
    """The docs path a ready Python replica reports in its ``/-/info`` (its ingress
    FastAPI app's ``docs_url``): read when asked, so it is known as soon as the
    replica is ready; None when no ready replica says one."""
    for r in sorted(rt.replicas.values(), key=lambda r: r.id):
        if r.control_port is None or r.status is not ReplicaStatus.READY:
            continue
        info = await read_info(rt.probe_session, _info_target(rt, r), timeout=5.0)
        if info is not None:
            path = info.get(DOCS_PATH_FIELD)
            return path if isinstance(path, str) else None
    return None
