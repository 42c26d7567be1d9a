"""Starting a replica: its row, its share of the machine, the version's
preparation, the backend's launch.

A replica is PENDING from its row until the machine has room for what it asks
(its GPUs, pinned cores, fixed port: controller/capacity.py), with an event
and a status notice naming what is missing, as Kubernetes leaves a pod
Pending on ``Insufficient nvidia.com/gpu``; it starts as soon as a replica of
any service releases enough, never failing meanwhile. Then PROVISIONING while
the backend prepares the version (workdir, setup), STARTING once its process runs at the address the
backend chose, and probed from then on (probing.py). Whatever goes wrong on the
way fails the replica visibly (FAILED_PROVISION), never leaves it stuck.
It reaches the runtime only through :class:`~steadyserve.controller.port.LaunchPort`.
"""

from __future__ import annotations

import asyncio
import logging

from steadyserve.backends.base import LaunchRequest, ProvisionError, ReplicaHandle
from steadyserve.controller.port import LaunchPort
from steadyserve.controller.probing import probe_loop
from steadyserve.core.capacity import Assignment, Insufficient
from steadyserve.core.states import EventKind, ReplicaStatus
from steadyserve.envs.plan import needs_environment
from steadyserve.oneline import one_line
from steadyserve.spec import ServiceSpec
from steadyserve.spec.ports import fixed_port, isolated
from steadyserve.store import ReplicaRow

log = logging.getLogger("steadyserve.controller")


def launch(rt: LaunchPort, version: int) -> None:
    """Add a replica of ``version`` (its id is never reused) and start it in a task."""
    replica_id = rt.store.take_replica_id(rt.name)
    replica = ReplicaRow(
        service=rt.name,
        id=replica_id,
        version=version,
        status=ReplicaStatus.PENDING,
        launched_at=rt.clock.wall(),
    )
    rt.store.add_replica(replica, f"launching to reach {rt.target_replicas()} replicas")
    rt.replicas[replica_id] = replica
    rt.hold(replica_id)
    # Admitted now if it fits, so the next replica launched in this tick (or the
    # planner's next look at the free room) already counts what this one holds.
    _record(rt, replica, rt.capacity.assign(rt.spec_for(version)))
    rt.spawn(replica, provision_and_start(rt, replica))


def _record(rt: LaunchPort, replica: ReplicaRow, got: Assignment | Insufficient) -> bool:
    """Write what the replica was given on its row; False when it did not fit."""
    if isinstance(got, Insufficient):
        return False
    text = got.to_json() if not got.empty else ""
    rt.store.update_replica(rt.name, replica.id, assignment=text)
    replica.assignment = text
    return True


def stop_unstarted(rt: LaunchPort, version: int, why: str) -> None:
    """``version`` is abandoned (its update aborted, failed or superseded): stop
    its replicas that have not started yet, and with them the setup (or ``pip``)
    they wait for.

    Cancelling the provisioning task is what ``steady down`` does too: the build
    kills its step's process group, deletes its half-built folder and links no
    environment (environment_build._build). Left alone, a ``setup`` that takes
    an hour would run on for a version nobody wants, and be linked when it ends.
    """
    unstarted = (ReplicaStatus.PENDING, ReplicaStatus.PROVISIONING)
    doomed = [r for r in rt.replicas.values() if r.version == version and r.status in unstarted]
    if not doomed:
        return
    spec = rt.spec_for(version)
    if needs_environment(spec.setup, spec.pip):
        rt.store.add_event(
            rt.name,
            None,
            None,
            EventKind.SETUP_STOPPED,
            f"setup of version {version} stopped: {why}",
        )
    reason = f"version {version} is no longer wanted: {why}"
    for replica in doomed:
        for task in list(rt.hold(replica.id).tasks):
            task.cancel()
        rt.transition(replica, ReplicaStatus.SHUTTING_DOWN, reason)
        rt.spawn(replica, rt.retire(replica, reason))
    rt.wake()


async def provision_and_start(rt: LaunchPort, replica: ReplicaRow) -> None:
    try:
        handle = await _provision(rt, replica)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # whatever it is, the replica fails visibly, never stuck
        if replica.status not in (ReplicaStatus.PENDING, ReplicaStatus.PROVISIONING):
            return  # stopped or failed meanwhile: that outcome stands
        log.warning("launching replica %s/%s failed", rt.name, replica.id, exc_info=True)
        message = str(exc) if isinstance(exc, ProvisionError) else one_line(exc)
        rt.mark_failed(replica, ReplicaStatus.FAILED_PROVISION, message)
        rt.judge_version(replica.version)
        rt.wake()
        return
    if handle is None:
        return
    held = rt.hold(replica.id)
    held.handle = handle
    held.started_at = rt.clock.wall()
    placed = tuple(getattr(handle, "gpu_ids", ()))
    if placed and not replica.assignment:  # a backend that places (Ray) chose its GPUs
        ids = tuple(int(i) for i in placed if str(i).isdigit())
        _record(
            rt, replica, Assignment(gpus=ids, uuids=tuple(i for i in placed if not i.isdigit()))
        )
    rt.transition(
        replica,
        ReplicaStatus.STARTING,
        f"process started (pid {handle.pid}, port {handle.port})",
        pid=handle.pid,
        pid_create_time=handle.create_time,
        ip=handle.host,
        port=handle.port,
        control_port=handle.control_port,
        netns=getattr(handle, "netns", None),
    )
    await probe_loop(rt, replica)


async def _provision(rt: LaunchPort, replica: ReplicaRow) -> ReplicaHandle | None:
    """Prepare the version and start the process; None if the replica was
    stopped meanwhile. Any exception is the caller's to turn into FAILED_PROVISION."""
    spec = rt.spec_for(replica.version)
    if not await _admit(rt, replica, spec):
        return None
    rt.transition(replica, ReplicaStatus.PROVISIONING, "preparing workdir")
    env = rt.environment.env(replica, spec)
    setup_env = rt.environment.setup_env(env)
    workdir = await rt.backend.prepare(
        rt.name, replica.version, spec.setup, setup_env, pip=spec.pip
    )
    if replica.status is not ReplicaStatus.PROVISIONING:
        return None
    held = Assignment.from_json(replica.assignment)
    return await rt.backend.launch(
        LaunchRequest(
            service=rt.name,
            version=replica.version,
            replica_id=replica.id,
            command=rt.environment.command(spec),
            env=env,
            workdir=workdir,
            log_path=rt.home.replica_log(rt.name, replica.id),
            control_port=spec.import_path is not None,
            setup=spec.setup,
            pip=spec.pip,
            resources=spec.resources,
            fixed_port=fixed_port(spec),
            cores=held.cores if held is not None else (),
            isolate=isolated(spec),
        )
    )


async def _admit(rt: LaunchPort, replica: ReplicaRow, spec: ServiceSpec) -> bool:
    """Wait (PENDING) until the machine can give the replica what it asks, then
    record what it was given on its row; False if it was stopped meanwhile.

    Assigning and recording happen with no await between them, so two replicas
    waking on the same release cannot both take the same devices."""
    pool = rt.capacity
    said: str | None = None
    try:
        while replica.status is ReplicaStatus.PENDING:
            if replica.assignment is not None:
                return True  # admitted when it was launched
            since = pool.generation
            got = pool.assign(spec)
            if _record(rt, replica, got) or not isinstance(got, Insufficient):
                return True
            if got.reason != said:
                said = got.reason
                rt.waiting[replica.id] = said
                rt.store.add_event(
                    rt.name, replica.id, ReplicaStatus.PENDING, ReplicaStatus.PENDING, said
                )
            await pool.wait(since)
        return False
    finally:
        rt.waiting.pop(replica.id, None)
