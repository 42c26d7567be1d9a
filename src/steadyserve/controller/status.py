"""The ``status --json`` view of a service (the machine contract: add keys, never remove)."""

from __future__ import annotations

from typing import Any

from steadyserve.controller.pool_runtime import PoolRuntime
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.capacity import Assignment
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import Resources
from steadyserve.store import ReplicaRow

REGION = "local"


def resources_label(resources: Resources, held: Assignment | None = None) -> str:
    """SkyServe's RESOURCES column, e.g. ``1x Local(cpus=2)``; a replica that holds
    GPUs shows them instead of what it asked for (``1x Local(gpus=2,3)``), and
    pinned cores as ``cores=0,1``."""
    parts = []
    for key in ("cpus", "memory", "accelerators"):
        value = getattr(resources, key, None)
        if value is None or (key == "accelerators" and held is not None and held.gpus):
            continue
        if isinstance(value, dict):
            value = ",".join(f"{k}:{v}" for k, v in value.items())
        parts.append(f"{key}={value}")
    if held is not None and held.gpus:
        parts.append("gpus=" + ",".join(str(i) for i in held.gpus))
    if held is not None and held.cores:
        parts.append("cores=" + ",".join(str(c) for c in held.cores))
    return f"1x Local({', '.join(parts)})"


def assignment_json(held: Assignment | None) -> dict[str, Any] | None:
    """``assignment`` in ``status --json``: what the replica holds of the machine."""
    if held is None or held.empty:
        return None
    return {
        "gpus": list(held.gpus),
        "gpu_uuids": list(held.uuids),
        "accelerator": held.accelerator,
        "cores": list(held.cores),
        "ports": list(held.ports),
    }


def _update_json(runtime: ServiceRuntime) -> dict[str, Any] | None:
    update = runtime.rollout.update
    if update is None:
        return None
    return {
        "mode": update.mode,
        "from_version": update.from_version,
        "to_version": update.to_version,
        "status": update.status,
        "message": update.message,
        "started_at": update.started_at,
        "finished_at": update.finished_at,
    }


def service_json(runtime: ServiceRuntime) -> dict[str, Any]:
    row = runtime.row
    replicas = sorted(runtime.replicas.values(), key=lambda r: r.id)
    routable = runtime.plan.routable
    active = sorted({r.version for r in replicas if r.id in routable})
    ready = sum(1 for r in replicas if r.status is ReplicaStatus.READY)
    total = sum(1 for r in replicas if r.status.is_live or r.status is ReplicaStatus.SHUTTING_DOWN)
    return {
        "name": row.name,
        "status": row.status,
        "version": row.version,
        "active_versions": active,
        "uptime_s": round(runtime.clock.wall() - row.created_at, 3),
        # A pool has no endpoint: nothing listens on its port.
        "endpoint": None if isinstance(runtime, PoolRuntime) else f"127.0.0.1:{row.port}",
        "scheme": "https" if runtime.spec.service.tls else "http",
        "ready_replicas": ready,
        "total_replicas": total,
        "target_replicas": runtime.target_replicas(),
        "autoscaling": runtime.autoscaler.status_json(runtime.clock.now()),
        "load_balancing_policy": runtime.spec.service.load_balancing_policy,
        "max_ongoing_requests": runtime.spec.service.max_ongoing_requests,
        "update": _update_json(runtime),
        "canary": runtime.canary.status_json(),  # step, weight, analysis
        "load_balancer_pid": runtime.lb.handle.pid if runtime.lb.handle else None,
        # Why the service is FAILED when its load balancer cannot start, or a
        # pool's workers could not run its setup; else None.
        "failure": runtime.lb.failure
        or (runtime.jobs.failure() if isinstance(runtime, PoolRuntime) else None),
        # The Ray Serve application and deployment it was made from.
        "application": runtime.spec.application,
        "deployment": runtime.spec.ray_options.get("deployment"),
        "route_prefix": runtime.spec.service.route_prefix,
        # A pool's policy, queue and jobs by worker (docs/pools.md); None for a service.
        "pool": runtime.jobs.status_json() if isinstance(runtime, PoolRuntime) else None,
        "replicas": [
            {
                "id": r.id,
                "version": r.version,
                "status": r.status,
                "ip": r.ip,
                "port": r.port,
                "pid": r.pid,
                "launched_at": r.launched_at,
                "resources": _resources_of(runtime, r),
                "region": _region_of(runtime, r.id),
                "notice": _notice(runtime, r.id),
                "reason": runtime.failure_reasons.get(r.id),
                "assignment": assignment_json(Assignment.from_json(r.assignment)),
                "pending_reason": runtime.waiting.get(r.id),
                "draining": draining_json(runtime, r.id),
                # As the load balancer last reported it (twice a second): what a
                # scale-down reads to stop the least busy replicas first.
                "in_flight": runtime.routes.inflight.get(r.id, 0),
            }
            for r in replicas
        ],
    }


def draining_json(runtime: ServiceRuntime, replica_id: int) -> dict[str, Any] | None:
    """A draining replica's wait: what it still carries, for how long it has waited.

    An update's SUCCEEDED does not wait for the old replicas to drain (a stream may
    run for minutes), so this is where a user sees them finish."""
    held = runtime.held.get(replica_id)
    since = held.draining_since if held is not None else None
    if since is None:
        return None
    return {
        "in_flight": runtime.routes.inflight.get(replica_id, 0),
        "waited_s": round(max(0.0, runtime.clock.now() - since), 1),
        "limit_s": runtime.spec.service.drain_timeout_s,
    }


def _notice(runtime: ServiceRuntime, replica_id: int) -> str | None:
    waiting = runtime.waiting.get(replica_id)
    if waiting is not None:
        return f"replica {replica_id} is PENDING: {waiting}"
    return runtime.port_watch.notices.get(replica_id)


def _resources_of(runtime: ServiceRuntime, replica: ReplicaRow) -> str:
    """What the replica asked its backend for: ``1x Ray(cpus=1, gpus=T4:1)`` for a
    Ray actor, else the local label with what it holds."""
    held = runtime.held.get(replica.id)
    described = getattr(held.handle, "resources", None) if held is not None else None
    if isinstance(described, str):
        return f"1x {described}"
    spec = runtime.spec_for(replica.version)
    return resources_label(spec.resources, Assignment.from_json(replica.assignment))


def _region_of(runtime: ServiceRuntime, replica_id: int) -> str:
    """Where the replica runs: the Ray node (hostname or shortened id), else local."""
    held = runtime.held.get(replica_id)
    region = getattr(held.handle, "region", None) if held is not None else None
    return region if isinstance(region, str) and region else REGION
