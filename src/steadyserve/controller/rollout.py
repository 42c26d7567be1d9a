"""Updates of one service: begin, relabel in place, deliver user_config, finish,
roll back. Functions over the service's runtime, which holds the state; the
planner decides what runs, these decide which version is the target.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from steadyserve.controller.reconfigure import post_user_config
from steadyserve.spec import ServiceSpec
from steadyserve.state import ReplicaRow, UpdateRow
from steadyserve.states import ReplicaStatus

if TYPE_CHECKING:
    from steadyserve.controller.runtime import ServiceRuntime

IN_PROGRESS, SUCCEEDED, FAILED, ROLLED_BACK = "IN_PROGRESS", "SUCCEEDED", "FAILED", "ROLLED_BACK"
CONTROL_RECONFIGURE = "/-/reconfigure"


def update_failure(rt: ServiceRuntime) -> str | None:
    """Why the update in flight has failed, or None while it may still succeed."""
    assert rt.update is not None
    version = rt.update.to_version
    if version in rt.broken_versions:
        return f"version {version} failed before any replica was ready"
    deadline = rt.update.started_at + rt.spec.service.update_deadline_s
    # A canary's pauses (and a wait for promote) are its own timeline: no deadline;
    # the time a rolling or blue-green update spends paused does not count.
    deadline += rt.canary.paused_seconds()
    if rt.update.mode != "canary" and time.time() > deadline:
        return f"not done within update_deadline_s={rt.spec.service.update_deadline_s:g}"
    limit = max(3, rt.target_replicas())
    if rt.update_failures >= limit:
        return f"{rt.update_failures} replicas of version {version} failed"
    return None


def finish_update(rt: ServiceRuntime, status: str, message: str) -> None:
    assert rt.update is not None
    rt.update.status = status
    rt.update.message = message
    rt.update.finished_at = time.time()
    rt.store.save_update(rt.update)
    rt.store.add_event(rt.name, None, IN_PROGRESS, f"UPDATE_{status}", message)
    if status == SUCCEEDED:
        if rt.row.stable_version != rt.row.version:
            rt.store.update_version(rt.name, rt.row.stable_version, outcome="retired")
        rt.row.stable_version = rt.row.version
        rt.store.update_service(rt.name, stable_version=rt.row.version)
        rt.store.update_version(rt.name, rt.row.version, outcome="active")


def roll_back(rt: ServiceRuntime, reason: str) -> None:
    """Make the last good version the target again; new replicas drain by the planner."""
    assert rt.update is not None
    failed_version = rt.update.to_version
    rt.store.update_version(rt.name, failed_version, outcome="failed")
    finish_update(rt, FAILED, f"{reason}; rolled back to version {rt.update.from_version}")
    set_version(rt, rt.update.from_version)


def set_version(rt: ServiceRuntime, version: int, spec: ServiceSpec | None = None) -> None:
    """Make ``version`` the target: the spec new replicas get and probes use.

    The spec being replaced stays cached under its own version, because replicas
    of that version may still run and be probed.
    """
    rt._old_specs[rt.row.version] = rt.spec
    rt.spec = spec or rt._old_specs.get(version) or rt._load_spec(version)
    rt.row.version = version
    rt.store.update_service(rt.name, version=version)
    rt.wake()


def begin_update(
    rt: ServiceRuntime,
    version: int,
    spec: ServiceSpec,
    mode: str,
    in_place: bool,
    message: str,
    *,
    rollback: bool = False,
) -> UpdateRow:
    """Start converging to ``version``: relabel in place, or launch by ``mode``."""
    previous = rt.update
    old_version, old_spec = rt.row.version, rt.spec
    if (
        in_place
        and previous is not None
        and previous.status == IN_PROGRESS
        and previous.mode != "in_place"
    ):
        # A restart update is under way: its target takes the in-place change and it
        # carries on in its own mode.
        previous.to_version = version
        previous.message = f"{previous.message}; then {message}"
        rt.store.save_update(previous)
        update = previous
    else:
        if previous is not None and previous.status == IN_PROGRESS:
            previous.status = ROLLED_BACK if rollback else FAILED
            previous.message = f"superseded by version {version}"
            previous.finished_at = time.time()
            rt.store.save_update(previous)
            rt.store.update_version(rt.name, previous.to_version, outcome="superseded")
        update = rt.store.add_update(
            UpdateRow(
                id=None,
                service=rt.name,
                mode="in_place" if in_place else mode,
                from_version=rt.row.stable_version if not in_place else old_version,
                to_version=version,
                status=IN_PROGRESS,
                message=message,
                started_at=time.time(),
            )
        )
        rt.update_failures = 0
    rt.update = update
    rt.store.add_event(rt.name, None, None, "UPDATE_STARTED", f"{update.mode}: {message}")
    set_version(rt, version, spec)
    if in_place:
        relabelled = relabel(rt, old_version, version)
        spawn_update(rt, deliver_in_place(rt, update, old_spec, old_version, relabelled))
    return update


def relabel(rt: ServiceRuntime, old_version: int, new_version: int) -> list[ReplicaRow]:
    """In place: the running replicas of ``old_version`` now count as ``new_version``."""
    moved = []
    for replica in rt.replicas.values():
        if ReplicaStatus(replica.status).is_live and replica.version == old_version:
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
    rt._publish(rt._routable_now())
    return moved


def spawn_update(rt: ServiceRuntime, coro: object) -> None:
    task: asyncio.Task[None] = asyncio.create_task(coro)  # type: ignore[arg-type]
    rt._update_tasks.add(task)
    task.add_done_callback(rt._update_tasks.discard)


async def deliver_in_place(
    rt: ServiceRuntime,
    update: UpdateRow,
    old_spec: ServiceSpec,
    old_version: int,
    relabelled: list[ReplicaRow],
) -> None:
    """Hand the new user_config to every relabelled replica; any failure fails the update."""
    failed: list[str] = []
    if rt.spec.service.user_config != old_spec.service.user_config:
        results = await asyncio.gather(
            *(
                deliver_user_config(rt, r)
                for r in relabelled
                if r.status in (ReplicaStatus.READY.value, ReplicaStatus.NOT_READY.value)
            )
        )
        failed = [why for ok, why in results if not ok]
    if update is not rt.update or update.status != IN_PROGRESS:
        return
    if failed:
        revert_in_place(rt, update, old_spec, old_version, failed[0])
    elif update.mode == "in_place":
        finish_update(rt, SUCCEEDED, f"applied in place to {len(relabelled)} replicas")
    rt.wake()


def revert_in_place(
    rt: ServiceRuntime, update: UpdateRow, old_spec: ServiceSpec, back_to: int, why: str
) -> None:
    """A reconfigure failed: the update fails and the old config comes back, in place."""
    rt.store.update_version(rt.name, update.to_version, outcome="failed")
    finish_update(rt, FAILED, f"{why}; reverted to version {back_to}")
    set_version(rt, back_to, old_spec)
    for replica in rt.replicas.values():
        if ReplicaStatus(replica.status).is_live and replica.version == update.to_version:
            rt.store.update_replica(rt.name, replica.id, version=back_to)
            replica.version = back_to
            if replica.status == ReplicaStatus.READY.value:
                rt._spawn(replica, redeliver(rt, replica))


async def redeliver(rt: ServiceRuntime, replica: ReplicaRow) -> None:
    await deliver_user_config(rt, replica)


async def deliver_user_config(
    rt: ServiceRuntime, replica: ReplicaRow, *, replace_on_refusal: bool = False
) -> tuple[bool, str]:
    """Hand user_config to one replica.

    A replica that cannot be reached is replaced. One that answers a refusal
    keeps its old config and keeps serving (the update fails instead), unless
    it is a new replica that must not serve without the config.
    """
    spec = rt._spec_for(replica.version)
    headers: dict[str, str] = {}
    if replica.control_port is not None:  # a Python replica: its runner's control port
        port, path = replica.control_port, CONTROL_RECONFIGURE
        headers = rt.control_headers(replica)
    elif spec.service.reconfigure_path is not None and replica.port is not None:
        port, path = replica.port, spec.service.reconfigure_path
    else:
        return True, ""
    ok, answered, why = await post_user_config(
        rt.probe_session, replica.ip, port, path, spec.service.user_config, headers=headers
    )
    if not ok and (replace_on_refusal or not answered) and ReplicaStatus(replica.status).is_live:
        rt._mark_failed(replica, ReplicaStatus.FAILED, why)
    return ok, why
