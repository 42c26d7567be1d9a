"""What a service's route table says: pure, from the spec and the replica rows.

The load balancer routes by this table (the controller publishes it through
routes.py); only READY replicas the plan calls routable are in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from steadyserve.core.capacity import Assignment, matches
from steadyserve.core.routing.instance_aware import capacity_for
from steadyserve.core.routing.options import PolicyOptions, ReplicaMetrics
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import Resources, ServiceSpec
from steadyserve.store import ReplicaRow
from steadyserve.wire import replica_contract as contract
from steadyserve.wire.mirror import Mirror
from steadyserve.wire.netns import path_of as netns_path
from steadyserve.wire.routes import Limits, ReplicaRoute, RouteTable


def route_table(
    spec: ServiceSpec,
    replicas: Iterable[ReplicaRow],
    routable: frozenset[int],
    *,
    hold_at_zero: bool,
    weights: tuple[tuple[int, int], ...] = (),
    preview: tuple[int, int] | None = None,
    models: Mapping[int, frozenset[str]] | None = None,
    mirror: Mirror | None = None,
) -> RouteTable:
    """The table to publish; its ``epoch`` and ``version`` are the publisher's
    (controller/routes.py stamps them on the JSON). ``models``: the multiplexed
    model ids each replica reported (controller/multiplexed.py)."""
    svc = spec.service
    lb = svc.load_balancer
    targets = svc.replica_policy.target_qps_per_replica if svc.replica_policy else None
    per_accelerator = targets if isinstance(targets, dict) else None
    held = models or {}
    routes = tuple(
        _route(r, replica_accelerator(spec, r), per_accelerator, held.get(r.id))
        for r in replicas
        if r.id in routable and r.status is ReplicaStatus.READY and r.port is not None
    )
    return RouteTable(
        epoch="",
        version=0,
        policy=svc.load_balancing_policy,
        max_ongoing_requests=svc.max_ongoing_requests,
        max_queued_requests=svc.max_queued_requests,
        replicas=routes,
        blocked_paths=frozenset(p.encode() for p in blocked_paths(spec)),
        limits=Limits(
            header_timeout_s=lb.header_timeout_s,
            body_timeout_s=lb.body_timeout_s,
            idle_timeout_s=lb.idle_timeout_s,
            max_connections=lb.max_connections,
            request_timeout_s=svc.request_timeout_s,
            trusted_proxies=tuple(lb.trusted_proxies),
            idempotent_methods=tuple(lb.idempotent_methods),
        ),
        # Scale to zero: the LB holds requests that arrive at zero this long.
        hold_at_zero_s=svc.cold_start_timeout_s if hold_at_zero else 0.0,
        access_log=svc.access_log,
        websocket_drain_s=svc.websocket_drain_s,
        weights=weights,
        preview=preview,
        options=policy_options(spec),
        multiplexed=any(r.models is not None for r in routes),
        mirror=mirror,
    )


def policy_options(spec: ServiceSpec) -> PolicyOptions:
    """``service.load_balancer``'s tuning of the request-aware policies."""
    lb = spec.service.load_balancer
    prefix = lb.prefix_affinity
    scrape = lb.replica_metrics
    return PolicyOptions(
        block_bytes=prefix.block_bytes,
        max_entries_per_replica=prefix.max_entries_per_replica,
        imbalance_threshold=prefix.imbalance_threshold,
        affinity_key=lb.affinity_key,
        affinity_epsilon=lb.affinity_epsilon,
        replica_metrics=None
        if scrape is None
        else ReplicaMetrics(
            path=scrape.path,
            gauge=scrape.gauge,
            interval_s=scrape.interval_s,
            timeout_s=scrape.timeout_s,
            max_age_s=scrape.max_age_s,
        ),
    )


def _route(
    row: ReplicaRow,
    accelerator: str | None,
    targets: dict[str, float] | None,
    models: frozenset[str] | None = None,
) -> ReplicaRoute:
    """A replica's route; with a per-accelerator target its ``capacity`` is its
    accelerator's target (what instance_aware_least_load divides its load by)."""
    assert row.port is not None  # only replicas with a port are routed
    capacity = 1.0 if targets is None else capacity_for(accelerator, targets)
    return ReplicaRoute(
        id=row.id,
        version=row.version,
        host=row.ip,
        port=row.port,
        accelerator=accelerator,
        capacity=capacity,
        netns=netns_path(row.netns) if row.netns is not None else None,
        models=models,
    )


def replica_accelerator(spec: ServiceSpec, row: ReplicaRow | None) -> str | None:
    """The accelerator a replica runs on (its name, without a count), or None.

    The GPUs it holds say: the spec's accelerator name their device matched when
    they were assigned (``A100`` for ``NVIDIA A100-SXM4-80GB``, core/capacity.py),
    the name a per-accelerator map is keyed by, as SkyPilot's launched resources
    name it; the device's own name if none matches. Without an assignment (no
    inventory, a replica waiting for a GPU, or the autoscaler asking before any
    replica runs), the spec's first choice of ``resources.accelerators``, else of
    the first ``any_of``/``ordered`` alternative that names one."""
    resources = spec.resources
    candidates: list[Resources] = [resources, *(resources.any_of or ()), *(resources.ordered or ())]
    names: list[str] = [c[0] for r in candidates for c in r.accelerator_choices()]
    held = _accelerator(row) if row is not None else None
    if held is not None:
        return next((name for name in names if matches(name, held)), held)
    return names[0] if names else None


def blocked_paths(spec: ServiceSpec) -> list[str]:
    """Control paths clients must never reach through the load balancer: a command
    replica's reconfigure_path; a Python replica's handle-call path (serve handles)."""
    reconfigure_path = spec.service.reconfigure_path
    blocked = [reconfigure_path] if reconfigure_path else []
    if spec.import_path is not None:
        blocked.append(contract.HANDLE_CALL_PATH)
    return blocked


def _accelerator(replica: ReplicaRow) -> str | None:
    """The name of the GPUs the replica holds (for an instance-aware policy), if any."""
    held = Assignment.from_json(replica.assignment)
    return held.accelerator if held is not None and held.gpus else None
