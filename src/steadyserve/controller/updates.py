"""Turn a new spec into a version: classify the change, plan it, hand it to the runtime.

The classifier decides in place versus restart; the runtime carries it out. A
dry run gives the same answer and writes nothing; the counts it (and every
update) shows are the planner's (core/update_counts.py), not a formula of its own. The caller (the
controller) holds the service's command lock around :func:`apply`, so version
numbers and snapshot folders are never shared by two commands.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steadyserve.controller.errors import BadInput
from steadyserve.core.changes import classify, shown
from steadyserve.core.states import (
    RESTART_MODES,
    UpdateMode,
    UpdateStatus,
    VersionOutcome,
)
from steadyserve.core.update_counts import update_counts
from steadyserve.envs import build as environment_build
from steadyserve.envs import manifest
from steadyserve.envs.workdir import (
    WorkdirError,
    check_root,
    collect_garbage,
    content_hash,
    max_bytes_from_env,
    relative_excludes,
    remove_snapshot,
    scan,
    snapshot,
)
from steadyserve.envs.workdir_diff import workdir_diff
from steadyserve.paths import Home
from steadyserve.replica_contract import SETUP_MARKER
from steadyserve.spec import ServiceSpec
from steadyserve.state import Store, VersionRow

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller
    from steadyserve.controller.runtime import ServiceRuntime

log = logging.getLogger("steadyserve.controller")


def _mode(spec: ServiceSpec, requested: str | None) -> UpdateMode:
    mode = requested or spec.service.update_mode
    if mode not in RESTART_MODES:
        choices = " or ".join(RESTART_MODES)
        raise BadInput(f"update mode {mode}: use {choices}")
    return UpdateMode(mode)


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
    keep_files: bool = False,
) -> dict[str, Any]:
    """``keep_files``: the new version has the current version's files, as they are
    stored (``steady jobs pool apply --workers N``, which names no file): the
    spec's workdir is not read again, so neither an edit made there since nor
    the service file itself (which no file names for exclusion) makes a change."""
    store, home, name = controller.store, controller.home, runtime.name
    if spec.service.port is not None and spec.service.port != runtime.row.port:
        raise BadInput(
            f"service.port: the endpoint port cannot change in an update "
            f"(it is {runtime.row.port}; take the service down and up again)"
        )
    if spec.service.auth_key != runtime.spec.service.auth_key:  # the LB reads it at start
        raise BadInput(
            "service.auth_key: the endpoint's key cannot change in an update"
            " (take the service down and up again)"
        )
    if spec.service.tls != runtime.spec.service.tls:  # the LB reads it at start
        raise BadInput(
            "service.tls: the endpoint's TLS files cannot change in an update"
            " (take the service down and up again)"
        )
    source = source_workdir or (Path(spec.workdir) if spec.workdir else None)
    current = store.version(name, runtime.row.version)
    assert current is not None
    current_files = home.version_workdir(name, runtime.row.version)
    recorded = manifest.read(home.version_dir(name, runtime.row.version))
    old_hash = current.workdir_hash
    if keep_files:
        kept = current.workdir_hash is not None and current_files.is_dir()
        source = current_files if kept else None
        exclude: set[str] = set(recorded.left_out)
        new_hash = current.workdir_hash
    else:
        # The service files of both versions are left out of both sides (envs/manifest.py).
        exclude = set(recorded.left_out) | relative_excludes(
            source, [spec_file] if spec_file else []
        )
        new_hash = await hash_workdir(source, exclude, home) if source is not None else None
        old_hash = await asyncio.to_thread(
            manifest.old_hash, current_files, recorded, exclude, current.workdir_hash
        )
    changes = classify(runtime.spec, spec, old_workdir_hash=old_hash, new_workdir_hash=new_hash)
    in_place = not changes.needs_restart
    chosen = UpdateMode.IN_PLACE if in_place else _mode(spec, mode)
    target = spec.service.target_replicas
    counts = update_counts(
        chosen,
        target,
        store.latest_version_number(name) + 1,
        runtime.views(),
        max_surge=spec.service.max_surge_count(target),
        max_unavailable=spec.service.max_unavailable_count(target),
    )
    result: dict[str, Any] = {
        "name": name,
        "changed": not changes.empty,
        "version": runtime.row.version,
        "mode": chosen,
        "changes": [
            {
                "path": c.path,
                "old": shown(c.path, c.old),
                "new": shown(c.path, c.new),
                "kind": c.kind,
                "why": c.why,
            }
            for c in changes.changes
        ],
        "launch": counts.launch,
        "stop": counts.drain,
        "dry_run": dry_run,
    }
    for change in result["changes"]:
        both = bool(change["old"] and change["new"]) and current_files.is_dir()
        if change["path"] == "workdir" and both and source is not None:
            # The files, not two content hashes (envs/workdir_diff.py).
            change["files"] = await asyncio.to_thread(
                workdir_diff, current_files, source, exclude, old_manifest=recorded
            )
    if changes.empty:
        result.update(launch=0, stop=0, mode="none")
        return result
    if chosen is UpdateMode.BLUE_GREEN:
        _check_blue_green_fits(runtime, spec, "--mode" if mode else "service.update_mode")
    if dry_run:
        return result
    number = store.latest_version_number(name) + 1
    workdir_hash = await take_snapshot(
        home, name, number, source, exclude, None if keep_files else new_hash
    )
    if keep_files:  # the copy may hold setup's output; the files are the current ones
        workdir_hash = current.workdir_hash
    old_marker = home.version_dir(name, runtime.row.version) / SETUP_MARKER
    if in_place and old_marker.exists():  # setup is unchanged: it already ran for this code
        (home.version_dir(name, number) / SETUP_MARKER).touch()
    message = changes.describe()
    if rollback_to is not None:
        message = f"rollback to version {rollback_to}: {message}"
    try:
        store.add_version(
            VersionRow(
                service=name,
                version=number,
                created_at=runtime.clock.wall(),
                spec_json=spec.spec_json(),
                spec_yaml=spec_yaml,
                workdir_hash=workdir_hash,
                mode=chosen,
                changes=message,
                outcome=VersionOutcome.IN_PROGRESS,
                base_version=runtime.row.version if in_place else None,
            )
        )
    except BaseException:  # never leave files of a version that was not recorded
        await asyncio.to_thread(shutil.rmtree, home.version_dir(name, number), True)
        raise
    runtime.rollout.begin(number, spec, chosen, message, rollback=rollback_to is not None)
    result["version"] = number
    await prune(store, home, runtime, spec.service.history_limit, keep=rollback_to)
    return result


def _check_blue_green_fits(runtime: ServiceRuntime, spec: ServiceSpec, field: str) -> None:
    """A blue-green update starts the whole new version beside the old one: refused
    before anything starts when the machine's free capacity cannot hold it, as a
    half-started blue-green update would hold GPUs and serve nothing new."""
    need = runtime.target_replicas()
    fits = runtime.capacity.limit(spec, need)
    if fits is None or fits >= need:
        return
    why = runtime.capacity.why_not(spec) or "the machine is full"
    raise BadInput(
        f"{field}: blue_green needs room for {need} new replicas beside the running ones,"
        f" this machine has room for {fits} ({why}); use --mode rolling"
    )


def _max_bytes() -> int:
    try:
        return max_bytes_from_env()
    except WorkdirError as exc:
        raise BadInput(str(exc)) from exc


async def hash_workdir(source: Path, exclude: set[str], home: Home) -> str:
    """Check a workdir (refused roots, special files, size limit) and hash it."""
    if not source.is_dir():
        raise BadInput(f"workdir: no such directory: {source}")
    try:
        check_root(source, home.root)
        return await asyncio.to_thread(content_hash, source, exclude, _max_bytes())
    except WorkdirError as exc:
        raise BadInput(str(exc)) from exc


async def take_snapshot(
    home: Home,
    name: str,
    number: int,
    source: Path | None,
    exclude: set[str],
    expected_hash: str | None,
) -> str | None:
    """Store version ``number``'s files: complete and verified, or not at all.

    A folder for a version number with no row is what a controller killed mid-
    snapshot leaves; the number is free again (the caller holds the lock), so
    the leftover goes.
    """
    if source is not None and not source.is_dir():
        raise BadInput(f"workdir: no such directory: {source}")
    stale = home.version_dir(name, number)
    if stale.exists():
        await asyncio.to_thread(shutil.rmtree, stale, True)
    dest = home.version_workdir(name, number)
    try:
        if source is not None:
            check_root(source, home.root)
        stored = await asyncio.to_thread(
            snapshot,
            source,
            dest,
            exclude,
            objects=home.service_dir(name) / "objects",
            max_bytes=_max_bytes(),
            expected_hash=expected_hash,
        )
    except WorkdirError as exc:
        raise BadInput(str(exc)) from exc
    # ``exclude`` is the service files left out; what the copy holds, before any
    # replica or setup writes into it.
    entries = await asyncio.to_thread(scan, dest) if source is not None else []
    await asyncio.to_thread(manifest.write, stale, exclude, entries)
    return stored


def protected_versions(store: Store, runtime: ServiceRuntime, keep: int | None) -> set[int]:
    """Versions whose files must stay whatever the limit: the current and stable
    versions, both ends of an update in flight, the default rollback target, any
    version a replica runs (and, for in-place versions, the folders their
    relabelled replicas were started in), and ``keep``."""
    rows = {v.version: v for v in store.versions(runtime.name)}
    found = {runtime.row.version, runtime.row.stable_version}
    if keep is not None:
        found.add(keep)
    if (
        runtime.rollout.update is not None
        and runtime.rollout.update.status is UpdateStatus.IN_PROGRESS
    ):
        found |= {runtime.rollout.update.from_version, runtime.rollout.update.to_version}
    earlier = [
        v.version
        for v in rows.values()
        if v.version < runtime.row.version
        and v.outcome is not VersionOutcome.FAILED
        and not v.pruned
    ]
    if earlier:
        found.add(max(earlier))
    for version in {r.version for r in runtime.replicas.values()}:
        # A replica relabelled in place still runs in the folder it was started in:
        # its version's base, or that one's base, and so on.
        found.add(version)
        row = rows.get(version)
        while row is not None and row.base_version is not None:
            found.add(row.base_version)
            row = rows.get(row.base_version)
    return found


async def prune(
    store: Store, home: Home, runtime: ServiceRuntime, limit: int, keep: int | None = None
) -> list[int]:
    """Delete the files of versions older than the newest ``limit``, except protected
    ones; they stay in history, marked pruned. Returns the versions pruned."""
    name = runtime.name
    rows = store.versions(name)
    recent = {v.version for v in rows[-limit:]}
    spared = recent | protected_versions(store, runtime, keep)
    doomed = [v.version for v in rows if v.version not in spared and not v.pruned]
    for version in doomed:
        # Marked first: a version whose files may be partly gone is never run again.
        store.update_version(name, version, pruned=1)
        await asyncio.to_thread(remove_snapshot, home.version_workdir(name, version))
    if doomed:
        try:  # the command succeeded; unreclaimed space is not a reason to fail it
            removed = await asyncio.to_thread(collect_garbage, home.service_dir(name) / "objects")
        except OSError:
            log.exception("%s: could not free stored files after pruning", name)
            removed = 0
        log.info("%s: pruned the files of versions %s (%d stored files)", name, doomed, removed)
    await prune_environments(store, home)
    return doomed


async def prune_environments(store: Store, home: Home) -> None:
    """delete the virtualenvs no kept version (of any service) uses."""
    try:
        kept = environment_build.kept_versions(home, store)
        freed = await asyncio.to_thread(environment_build.prune_unused, home, kept)
    except OSError:  # unreclaimed space is not a reason to fail the command
        log.exception("could not delete unused environments")
        return
    if freed:
        log.info("deleted %d unused environments: %s", len(freed), [k[:16] for k in freed])


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
        if found.pruned:
            raise BadInput(
                f"--to: the files of version {to} were pruned (service.history_limit keeps "
                f"the newest versions' files); it cannot be rolled back to"
            )
        return found
    earlier = [
        v
        for v in versions
        if v.version < current and v.outcome is not VersionOutcome.FAILED and not v.pruned
    ]
    if not earlier:
        raise BadInput(f"service {runtime.name} has no earlier version to roll back to")
    return earlier[-1]
