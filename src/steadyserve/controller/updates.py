"""Turn a new spec into a version: classify the change, plan it, hand it to the runtime.

The classifier decides in place versus restart; the runtime carries it out. A
dry run computes the same answer and writes nothing.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steadyserve.changes import classify
from steadyserve.controller import rollout
from steadyserve.controller.errors import BadInput
from steadyserve.replica_contract import SETUP_MARKER
from steadyserve.spec import ServiceSpec
from steadyserve.state import Store, VersionRow
from steadyserve.states import ReplicaStatus
from steadyserve.workdir import content_hash, relative_excludes, snapshot

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller
    from steadyserve.controller.runtime import ServiceRuntime

MODES = ("rolling", "blue_green")


def _mode(spec: ServiceSpec, requested: str | None) -> str:
    mode = requested or spec.service.update_mode
    if mode not in MODES:
        raise BadInput(f"update mode {mode}: not implemented yet (use rolling or blue_green)")
    return mode


async def apply(
    controller: Controller,
    runtime: ServiceRuntime,
    spec: ServiceSpec,
    spec_yaml: str,
    *,
    mode: str | None,
    dry_run: bool,
    source_workdir: Path | None,
    rollback_to: int | None,
    spec_file: str | None = None,
) -> dict[str, Any]:
    store, home, name = controller.store, controller.home, runtime.name
    if spec.service.port is not None and spec.service.port != runtime.row.port:
        raise BadInput(
            f"service.port: the endpoint port cannot change in an update "
            f"(it is {runtime.row.port}; take the service down and up again)"
        )
    source = source_workdir or (Path(spec.workdir) if spec.workdir else None)
    if source is not None and not source.is_dir():
        raise BadInput(f"workdir: no such directory: {source}")
    current = store.version(name, runtime.row.version)
    assert current is not None
    exclude = relative_excludes(source, [spec_file] if spec_file else [])
    new_hash = (
        await asyncio.to_thread(content_hash, source, exclude) if source is not None else None
    )
    changes = classify(
        runtime.spec, spec, old_workdir_hash=current.workdir_hash, new_workdir_hash=new_hash
    )
    in_place = not changes.needs_restart
    chosen = "in_place" if in_place else _mode(spec, mode)
    live = sum(1 for r in runtime.replicas.values() if ReplicaStatus(r.status).is_live)
    target = spec.service.target_replicas
    result: dict[str, Any] = {
        "name": name,
        "changed": not changes.empty,
        "version": runtime.row.version,
        "mode": chosen,
        "changes": [
            {
                "path": c.path,
                "old": _shown(c.path, c.old),
                "new": _shown(c.path, c.new),
                "kind": c.kind,
                "why": c.why,
            }
            for c in changes.changes
        ],
        "launch": target if not in_place else max(0, target - live),
        "stop": live if not in_place else max(0, live - target),
        "dry_run": dry_run,
    }
    if changes.empty:
        result.update(launch=0, stop=0, mode="none")
        return result
    if dry_run:
        return result
    number = store.latest_version_number(name) + 1
    dest = home.version_workdir(name, number)
    workdir_hash = await asyncio.to_thread(snapshot, source, dest, exclude)
    old_marker = home.version_dir(name, runtime.row.version) / SETUP_MARKER
    if in_place and old_marker.exists():  # setup is unchanged: it already ran for this code
        (home.version_dir(name, number) / SETUP_MARKER).touch()
    message = changes.describe()
    if rollback_to is not None:
        message = f"rollback to version {rollback_to}: {message}"
    store.add_version(
        VersionRow(
            service=name,
            version=number,
            created_at=time.time(),
            spec_json=spec.spec_json(),
            spec_yaml=spec_yaml,
            workdir_hash=workdir_hash,
            mode=chosen,
            changes=message,
            outcome="in progress",
        )
    )
    rollout.begin_update(
        runtime, number, spec, chosen, in_place, message, rollback=rollback_to is not None
    )
    result["version"] = number
    return result


def _shown(path: str, value: object) -> object:
    """Env values may be secrets: a plan says that they changed, not what they are."""
    if path.startswith("envs.") and value is not None:
        return "(set)"
    return value


def rollback_target(store: Store, runtime: ServiceRuntime, to: int | None) -> VersionRow:
    """The version to go back to: ``to``, else the newest earlier one that did not fail."""
    current = runtime.row.version
    versions = store.versions(runtime.name)
    if to is not None:
        found = next((v for v in versions if v.version == to), None)
        if found is None:
            raise BadInput(f"--to: service {runtime.name} has no version {to}")
        if to == current:
            raise BadInput(f"--to: version {to} is already the current version")
        return found
    earlier = [v for v in versions if v.version < current and v.outcome != "failed"]
    if not earlier:
        raise BadInput(f"service {runtime.name} has no earlier version to roll back to")
    return earlier[-1]
