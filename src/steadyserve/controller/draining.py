"""A replica leaving service: drained (out of routing, every LB worker has
acknowledged a table without it and has nothing in flight for it), then stopped
and forgotten; and a failed replica's process stopped.

The order is the zero-failed-requests guarantee of docs/design.md ("A replica
leaves service in this order"): never stop a process the load balancer may
still send a request to.
"""

from __future__ import annotations

from collections.abc import Awaitable

from steadyserve.backends.base import ReplicaHandle
from steadyserve.controller.port import DrainPort
from steadyserve.core.states import ReplicaStatus
from steadyserve.store import ReplicaRow


async def stop_failed(rt: DrainPort, replica: ReplicaRow, handle: ReplicaHandle) -> None:
    """Stop a failed replica's process; a Ray replica lost with its node is PREEMPTED."""
    await rt.backend.stop(handle, rt.spec.service.graceful_shutdown_timeout_s)
    if (
        handle.preempted
        and replica.id in rt.replicas
        and replica.status in (ReplicaStatus.FAILED, ReplicaStatus.FAILED_PROBING)
    ):
        # Its probes failed first; stopping it showed why: the node is gone.
        rt.transition(replica, ReplicaStatus.PREEMPTED, "its node is gone")
    if replica.id in rt.replicas:
        rt.store.update_replica(rt.name, replica.id, pid=None)
        replica.pid = None
    rt.capacity.changed()


def stop_all(rt: DrainPort) -> list[Awaitable[None]]:
    """``steady down``: cancel every replica's tasks now, and return the stops of their
    processes, to await beside the load balancer's (nothing routes to them any more)."""
    stops: list[Awaitable[None]] = []
    for replica in list(rt.replicas.values()):
        held = rt.held.get(replica.id)
        if held is None:
            continue
        for task in held.tasks:
            task.cancel()
        if held.handle is not None:
            stops.append(rt.backend.stop(held.handle, rt.spec.service.graceful_shutdown_timeout_s))
    return stops


async def retire(rt: DrainPort, replica: ReplicaRow, reason: str) -> None:
    """Drain (out of routing, LB acknowledged, nothing in flight), then stop and forget."""
    svc = rt.spec.service
    removed_in = rt.routes.version
    deadline = rt.clock.now() + svc.graceful_shutdown_timeout_s
    while rt.lb.running and not rt.routes.drained(replica.id, removed_in):
        if rt.clock.now() >= deadline:
            break
        await rt.clock.sleep(
            min(svc.graceful_shutdown_wait_loop_s, max(0.0, deadline - rt.clock.now()))
        )
    held = rt.held.get(replica.id)
    if held is not None and held.handle is not None:
        await rt.backend.stop(held.handle, svc.graceful_shutdown_timeout_s)
    rt.replicas.pop(replica.id, None)
    rt.held.pop(replica.id, None)
    rt.port_watch.forget(replica.id)
    rt.store.remove_replica(replica, reason)
    rt.capacity.changed()  # what it held is free: a PENDING replica may start
    rt.wake()
