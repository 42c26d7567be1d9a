"""A replica whose process exited: failed, with its last words as the reason, or preempted.

The reconcile tick observes exits here (docs/design.md, "The reconcile tick"),
through the runtime's narrow port: a process that exits is FAILED at once, so
the next plan replaces it; one that crashed before it was ever ready judges its
version (SkyServe's rule), and its log's last line goes into the reason, where
users look first.
"""

from __future__ import annotations

from steadyserve.compat.skyserve import MASK, secret_values
from steadyserve.controller.port import ExitPort
from steadyserve.core.states import ReplicaStatus
from steadyserve.oneline import file_tail


def reap_exited(rt: ExitPort) -> None:
    """Fail (or mark preempted) every live replica whose process has exited."""
    for replica in list(rt.replicas.values()):
        held = rt.held.get(replica.id)
        if not replica.status.is_live or held is None or held.handle is None:
            continue
        code = held.handle.exit_code()
        if code is None:
            continue
        if held.handle.preempted and replica.status.is_probed:
            # Its node died (the Ray backend): replaced like any lost replica, but it
            # counts against neither the version nor an update in flight.
            rt.transition(replica, ReplicaStatus.PREEMPTED, "its node is gone")
            rt.publish_now()
            rt.wake()
            continue
        before_ready = replica.status.before_ready
        reason = f"process exited with code {code}"
        why = getattr(held.handle, "exit_reason", None)  # the local backend: OOM
        said = why() if callable(why) else None
        if said:
            reason = f"{said}; {reason}"
        if before_ready:
            # A crash at start-up is explained by its last words (a traceback's
            # last line, "address already in use"): put them where users look.
            # Secrets are masked there as in ``steady logs``.
            output = file_tail(
                rt.home.replica_log(rt.name, replica.id),
                hide=secret_values(rt.home.db_path, rt.name),
                mask=MASK,
            )
            reason += f" before it was ready; its last output: {output}"
        failed = ReplicaStatus.FAILED
        if code == 0 and replica.status in (ReplicaStatus.READY, ReplicaStatus.NOT_READY):
            # SkyServe's rule: an app that served and then ended cleanly did not
            # fail (its job succeeded); it stopped answering its probes.
            failed = ReplicaStatus.FAILED_PROBING
            reason += " after it was ready: its probes fail"
        rt.mark_failed(replica, failed, reason)
        if before_ready:
            rt.judge_version(replica.version)
