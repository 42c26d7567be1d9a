"""What a service's route table says: pure, from the spec and the replica rows.

The load balancer routes by this table (the controller publishes it through
routes.py); only READY replicas the plan calls routable are in it.
"""

from __future__ import annotations

from collections.abc import Iterable

from steadyserve import replica_contract as contract
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ServiceSpec
from steadyserve.state import ReplicaRow
from steadyserve.wire.routes import Limits, ReplicaRoute, RouteTable


def route_table(
    spec: ServiceSpec,
    replicas: Iterable[ReplicaRow],
    routable: frozenset[int],
    *,
    hold_at_zero: bool,
    weights: tuple[tuple[int, int], ...] = (),
    preview: tuple[int, int] | None = None,
) -> RouteTable:
    """The table to publish; its ``epoch`` and ``version`` are the publisher's
    (controller/routes.py stamps them on the JSON)."""
    svc = spec.service
    lb = svc.load_balancer
    return RouteTable(
        epoch="",
        version=0,
        policy=svc.load_balancing_policy,
        max_ongoing_requests=svc.max_ongoing_requests,
        max_queued_requests=svc.max_queued_requests,
        replicas=tuple(
            ReplicaRoute(id=r.id, version=r.version, host=r.ip, port=r.port)
            for r in replicas
            if r.id in routable and r.status is ReplicaStatus.READY and r.port is not None
        ),
        blocked_paths=frozenset(p.encode() for p in blocked_paths(spec)),
        limits=Limits(
            header_timeout_s=lb.header_timeout_s,
            body_timeout_s=lb.body_timeout_s,
            idle_timeout_s=lb.idle_timeout_s,
            max_connections=lb.max_connections,
            request_timeout_s=svc.request_timeout_s,
            trusted_proxies=tuple(lb.trusted_proxies),
        ),
        # Scale to zero: the LB holds requests that arrive at zero this long.
        hold_at_zero_s=svc.cold_start_timeout_s if hold_at_zero else 0.0,
        access_log=svc.access_log,
        websocket_drain_s=svc.websocket_drain_s,
        weights=weights,
        preview=preview,
    )


def blocked_paths(spec: ServiceSpec) -> list[str]:
    """Control paths clients must never reach through the load balancer: a command
    replica's reconfigure_path; a Python replica's handle-call path (serve handles)."""
    reconfigure_path = spec.service.reconfigure_path
    blocked = [reconfigure_path] if reconfigure_path else []
    if spec.import_path is not None:
        blocked.append(contract.HANDLE_CALL_PATH)
    return blocked
