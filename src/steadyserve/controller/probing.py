"""Readiness probing of one replica: the rules (pure) and the loop that applies them.

:func:`judge_probe` is the whole rule set, without I/O: a probe that passes
makes a starting or not-ready replica READY; a starting replica that fails
past ``initial_delay_seconds`` is FAILED_INITIAL_DELAY (and judges its
version); a running one turns NOT_READY at its first failure and is replaced
after ``FAILED_PROBES_TO_REPLACE`` in a row. :func:`probe_loop` runs the probes
through the runtime's injected prober and clock, reaching the runtime only
through :class:`~steadyserve.controller.port.ProbePort`.
"""

from __future__ import annotations

from dataclasses import dataclass

from steadyserve.controller.port import ProbePort
from steadyserve.controller.probes import probe_in_netns
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ReadinessProbe, ServiceSpec
from steadyserve.store import ReplicaRow
from steadyserve.wire import replica_contract as contract
from steadyserve.wire.netns import path_of as netns_path

# A replica that is still starting is probed this often, however long it takes to
# load: the first request of a service at zero waits for it, so a back-off (to
# health_check_period_s, 10 s in SkyServe files) would add up to that much to it.
STARTING_PROBE_S = 0.1
WORKER_SETUP_POLL_S = 0.2
"""How often a starting pool worker's log is read for its ready line."""
FAILED_PROBES_TO_REPLACE = 3
CONTROL_HEALTH = "/-/healthz"


@dataclass(frozen=True)
class ProbeVerdict:
    """What one probe result does to a replica."""

    failed_probes: int
    """The count of failed probes in a row, after this one."""
    status: ReplicaStatus | None = None
    """The replica's new state, or None when it stays."""
    reason: str = ""
    judge_version: bool = False
    """A failure before the version ever served: judge whether the version is broken."""


def judge_probe(
    status: ReplicaStatus,
    ok: bool,
    why: str,
    *,
    failed_probes: int,
    running_for_s: float,
    initial_delay_s: float,
) -> ProbeVerdict:
    if ok:
        if status in (ReplicaStatus.STARTING, ReplicaStatus.NOT_READY):
            return ProbeVerdict(0, ReplicaStatus.READY, "readiness probe passed")
        return ProbeVerdict(0)
    if status is ReplicaStatus.STARTING:
        if running_for_s > initial_delay_s:
            return ProbeVerdict(
                failed_probes,
                ReplicaStatus.FAILED_INITIAL_DELAY,
                f"not ready after initial_delay_seconds={initial_delay_s}: {why}",
                judge_version=True,
            )
        return ProbeVerdict(failed_probes)
    failed = failed_probes + 1
    if failed >= FAILED_PROBES_TO_REPLACE:
        return ProbeVerdict(
            failed, ReplicaStatus.FAILED_PROBING, f"{failed} probes failed in a row: {why}"
        )
    if status is ReplicaStatus.READY:
        return ProbeVerdict(failed, ReplicaStatus.NOT_READY, why)
    return ProbeVerdict(failed)


def probe_target(
    rt: ProbePort, replica: ReplicaRow, spec: ServiceSpec
) -> tuple[ReadinessProbe, int]:
    """Command replicas: the file's readiness probe. Python replicas: the runner's
    health endpoint, which also runs check_health() within health_check_timeout_s."""
    if replica.control_port is None:
        assert replica.port is not None
        return spec.service.readiness_probe, replica.port
    probe = ReadinessProbe(
        path=CONTROL_HEALTH,
        initial_delay_seconds=spec.service.readiness_probe.initial_delay_seconds,
        # A little past the runner's own check_health() bound, so its clear
        # "unhealthy" answer arrives before the probe gives up.
        timeout_seconds=spec.service.health_check_timeout_s + 2.0,
        headers=rt.environment.control_headers(replica),
    )
    return probe, replica.control_port


async def probe_loop(rt: ProbePort, replica: ReplicaRow) -> None:
    """Probe while the replica's process runs: every 0.1 s while it starts, then every
    ``health_check_period_s``. A new replica gets its user_config before it serves."""
    svc = rt.spec.service
    while replica.status.is_probed:
        spec = rt.spec_for(replica.version)
        probe, port = probe_target(rt, replica, spec)
        if spec.service.pool is not None:  # a worker: ready once setup ran and it runs
            worker_ready(rt, replica)
            starting = replica.status is ReplicaStatus.STARTING  # its setup runs: look often
            await rt.clock.sleep(WORKER_SETUP_POLL_S if starting else svc.health_check_period_s)
            continue
        if replica.netns is None:
            ok, why = await rt.prober(replica.ip, port, probe)
        else:  # in its own network namespace (service.isolation)
            ok, why = await probe_in_netns(netns_path(replica.netns), replica.ip, port, probe)
        if not replica.status.is_live:
            return
        if (
            ok
            and replica.status is ReplicaStatus.STARTING
            and replica.control_port is None
            and spec.service.user_config is not None
        ):
            ok, why = await rt.deliver_user_config(replica, replace_on_refusal=True)
            if not ok:
                rt.judge_version(replica.version)
                return
        if ok and replica.control_port is not None and replica.status is not ReplicaStatus.READY:
            await rt.learn_models(replica)  # the table that first lists it knows its models
            if not replica.status.is_live:
                return
        apply_probe(rt, replica, ok, why)
        if replica.status is ReplicaStatus.STARTING:
            await rt.clock.sleep(STARTING_PROBE_S)
        else:
            await rt.clock.sleep(svc.health_check_period_s)


def worker_ready(rt: ProbePort, replica: ReplicaRow) -> None:
    """A pool's worker has no probe: READY once its own setup ran (a line of its log
    says so, replica_contract.py) and its process runs (an exit fails it, as a
    replica's does: exits.py; a setup that failed is such an exit)."""
    if replica.status is not ReplicaStatus.STARTING:
        return
    held = rt.hold(replica.id)
    log = rt.environment.home.replica_log(rt.name, replica.id)
    ready, held.log_read = contract.worker_ready(log, held.log_read)
    if ready:
        rt.transition(
            replica,
            ReplicaStatus.READY,
            "setup finished: the worker takes jobs",
            ready_at=rt.clock.wall(),
        )
        rt.version_served(replica.version)
        rt.wake()


def apply_probe(rt: ProbePort, replica: ReplicaRow, ok: bool, why: str) -> None:
    """Carry out :func:`judge_probe`'s verdict on one replica."""
    held = rt.hold(replica.id)
    status = replica.status
    started = held.started_at or replica.launched_at
    verdict = judge_probe(
        status,
        ok,
        why,
        failed_probes=held.failed_probes,
        running_for_s=rt.clock.wall() - started,
        initial_delay_s=rt.spec.service.readiness_probe.initial_delay_seconds,
    )
    held.failed_probes = verdict.failed_probes
    if not ok and status is ReplicaStatus.STARTING and replica.control_port is None:
        rt.port_watch.check(replica.id, replica.pid, replica.port)  # skyserve: fixed ports
    new = verdict.status
    if new is ReplicaStatus.READY:
        extra = {"ready_at": rt.clock.wall()} if replica.ready_at is None else {}
        rt.transition(replica, new, verdict.reason, **extra)
        rt.version_served(replica.version)
        rt.wake()
    elif new is not None and new.is_failed:
        rt.mark_failed(replica, new, verdict.reason)
        if verdict.judge_version:
            rt.judge_version(replica.version)
        rt.wake()
    elif new is ReplicaStatus.NOT_READY:
        rt.transition(replica, new, verdict.reason)
        rt.publish_now()
        rt.wake()
    elif not ok and status is not ReplicaStatus.STARTING:
        rt.wake()
