"""Re-adoption: take over what a previous controller of this home left running.

Replicas and load balancers outlive a controller (their own process groups), so
a restarted controller finds each replica row's process again through the
backend and resumes what was under way: probing, a drain, a failed replica's
stop. What cannot be resumed fails visibly. The load balancer and an in-place
update are the runtime's own to resume (``ServiceRuntime.resume``); this module
reaches the runtime only through :class:`~steadyserve.controller.port.AdoptPort`.
"""

from __future__ import annotations

from steadyserve.backends.base import AdoptRequest
from steadyserve.controller.port import AdoptPort
from steadyserve.controller.probing import probe_loop
from steadyserve.core.states import ReplicaStatus


def readopt(rt: AdoptPort) -> None:
    """Find every listed replica's process again and resume its probing, drain or stop."""
    for replica in list(rt.replicas.values()):
        held = rt.hold(replica.id)
        status = replica.status
        if replica.pid is not None and replica.port is not None:
            held.handle = rt.backend.adopt(
                AdoptRequest(
                    replica.pid,
                    replica.pid_create_time,
                    replica.ip,
                    replica.port,
                    replica.control_port,
                    service=rt.name,
                    replica_id=replica.id,
                    netns=replica.netns,
                )
            )
        if status.is_live or status is ReplicaStatus.SHUTTING_DOWN:
            if held.handle is None:
                rt.mark_failed(replica, ReplicaStatus.FAILED, "gone while the controller was down")
                continue
            held.started_at = replica.launched_at
            if status is ReplicaStatus.SHUTTING_DOWN:
                rt.spawn(replica, rt.retire(replica, "stopping (resumed)"))
            elif status in (ReplicaStatus.PENDING, ReplicaStatus.PROVISIONING):
                rt.mark_failed(replica, ReplicaStatus.FAILED_PROVISION, "controller restarted")
            else:
                rt.spawn(replica, probe_loop(rt, replica))
        elif held.handle is not None:
            # Failed, and the previous controller died before its stop finished.
            rt.spawn(replica, rt.stop_failed(replica, held.handle))
