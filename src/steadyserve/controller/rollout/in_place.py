"""An in-place update: relabel the running replicas with the new version, hand each
the new ``user_config``, and finish the update, or revert it when a replica
refuses the config (the old config comes back, in place). An in-place change
during a restart update joins it (``Rollout.begin``): a refusal then reverts
only the change, and the restart goes on."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from steadyserve.controller.reconfigure import post_user_config
from steadyserve.core.states import ReplicaStatus, UpdateStatus, VersionOutcome
from steadyserve.core.strategies import strategy_of
from steadyserve.spec import ServiceSpec
from steadyserve.store import ReplicaRow, UpdateRow
from steadyserve.wire.netns import path_of as netns_path

if TYPE_CHECKING:
    from steadyserve.controller.port import RolloutPort
    from steadyserve.controller.rollout.state import Rollout

CONTROL_RECONFIGURE = "/-/reconfigure"
STARTING_WAIT_S = 0.1
"""How often an in-place update looks at relabelled replicas that still start."""


def relabel(rollout: Rollout, old_version: int, new_version: int) -> list[ReplicaRow]:
    """In place: the running replicas of ``old_version`` now count as ``new_version``."""
    rt = rollout.rt
    moved = []
    proven = old_version in rt.ready_versions
    for replica in rt.replicas.values():
        if replica.status.is_live and replica.version == old_version:
            rt.store.update_replica(rt.name, replica.id, version=new_version)
            rt.store.add_event(
                rt.name,
                replica.id,
                replica.status,
                replica.status,
                f"relabelled from version {old_version} to {new_version} (in place)",
            )
            replica.version = new_version
            moved.append(replica)
            if replica.ready_at is not None or proven:
                # It serves the new version as it runs (or will: its process is the
                # old version's, which served): the version has served, so a replica
                # of it that fails to start does not judge it broken (no replacement
                # would be launched, as a restarted controller would). A replica-count
                # change while the only replica still started left the service with
                # none for good when that replica failed its initial delay.
                rt.version_served(new_version)
    rt.publish_now()
    return moved


async def deliver(
    rollout: Rollout,
    update: UpdateRow,
    old_spec: ServiceSpec,
    old_version: int,
    relabelled: list[ReplicaRow],
) -> None:
    """Hand the new user_config to every relabelled replica; any failure fails the update."""
    rt = rollout.rt
    failed: list[str] = []
    if rt.spec.service.user_config != old_spec.service.user_config:
        results = await asyncio.gather(
            *(
                deliver_user_config(rt, r)
                for r in relabelled
                if r.status in (ReplicaStatus.READY, ReplicaStatus.NOT_READY)
            )
        )
        failed = [why for ok, why in results if not ok]
        failed += await _starting_ones(rollout, update, relabelled)
    if update is not rollout.update or update.status is not UpdateStatus.IN_PROGRESS:
        return
    if failed:
        revert(rollout, update, old_spec, old_version, failed[0])
    elif not strategy_of(update.mode).restarts:
        rollout.finish(UpdateStatus.SUCCEEDED, f"applied in place to {len(relabelled)} replicas")
    rt.wake()


async def _starting_ones(
    rollout: Rollout, update: UpdateRow, relabelled: list[ReplicaRow]
) -> list[str]:
    """Relabelled replicas still starting take the new config when their probe first
    passes (probing.py), and fail if they refuse it: the update waits for them, and
    their refusals fail it, as a running replica's would (else it succeeded with the
    config taken by none, and the refusal left the version judged broken)."""
    rt = rollout.rt
    target = update.to_version
    starting = [r for r in relabelled if r.status is ReplicaStatus.STARTING]

    def ours() -> bool:  # a newer in-place change joining takes over (and judges)
        return (
            update is rollout.update
            and update.status is UpdateStatus.IN_PROGRESS
            and update.to_version == target
        )

    while ours() and any(r.status is ReplicaStatus.STARTING for r in starting):
        await rt.clock.sleep(STARTING_WAIT_S)
    if not ours():
        return []
    return [
        rt.failure_reasons.get(r.id, "it failed as it started")
        for r in starting
        if r.status.is_failed and r.version == target
    ]


def revert(
    rollout: Rollout, update: UpdateRow, old_spec: ServiceSpec, back_to: int, why: str
) -> None:
    """A reconfigure failed: the in-place version fails and the old config comes back,
    in place. An in-place update ends FAILED; a restart update the change had joined
    carries on to the version it had (``back_to``), and ends as it would have."""
    rt = rollout.rt
    with rt.store.transaction():
        rt.store.move_outcome(rt.name, update.to_version, VersionOutcome.FAILED)
        if not strategy_of(update.mode).restarts:
            rollout.finish(UpdateStatus.FAILED, f"{why}; reverted to version {back_to}")
        else:
            failed = update.to_version
            update.to_version = back_to
            update.message = f"{update.message}; version {failed} failed ({why}), reverted"
            rt.store.save_update(update)
        rt.set_version(back_to, old_spec)
        for replica in rt.replicas.values():
            if replica.status.is_live and replica.version == update.to_version:
                rt.store.update_replica(rt.name, replica.id, version=back_to)
    for replica in rt.replicas.values():
        if replica.status.is_live and replica.version == update.to_version:
            replica.version = back_to
            if replica.status is ReplicaStatus.READY:
                rt.spawn(replica, _redeliver(rt, replica))


async def _redeliver(rt: RolloutPort, replica: ReplicaRow) -> None:
    await deliver_user_config(rt, replica)


async def deliver_user_config(
    rt: RolloutPort, replica: ReplicaRow, *, replace_on_refusal: bool = False
) -> tuple[bool, str]:
    """Hand user_config to one replica.

    A replica that cannot be reached is replaced. One that answers a refusal
    keeps its old config and keeps serving (the update fails instead), unless
    it is a new replica that must not serve without the config.
    """
    spec = rt.spec_for(replica.version)
    headers: dict[str, str] = {}
    if replica.control_port is not None:  # a Python replica: its runner's control port
        port, path = replica.control_port, CONTROL_RECONFIGURE
        headers = rt.environment.control_headers(replica)
    elif spec.service.reconfigure_path is not None and replica.port is not None:
        port, path = replica.port, spec.service.reconfigure_path
    else:
        return True, ""
    ok, answered, why = await post_user_config(
        rt.probe_session,
        replica.ip,
        port,
        path,
        spec.service.user_config,
        headers=headers,
        netns=netns_path(replica.netns) if replica.netns is not None else None,
    )
    if not ok and (replace_on_refusal or not answered) and replica.status.is_live:
        rt.mark_failed(replica, ReplicaStatus.FAILED, why)
    return ok, why
