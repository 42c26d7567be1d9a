"""Turn a new spec into a version: read its files, describe the update (pure:
controller/update_plan.py), then commit it: snapshot, version row, rollout, prune.

The classifier decides in place versus restart; the runtime carries it out. A
dry run gives the same answer and writes nothing; the counts it (and every
update) shows are the update strategy's (core/strategies/), not a formula of its
own. The caller (the controller) holds the service's command lock around
:func:`apply`, so version numbers and snapshot folders are never shared by two
commands.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steadyserve.controller.errors import BadInput
from steadyserve.controller.update_plan import UpdatePlan, check_unchangeable, describe_update
from steadyserve.core.states import (
    UpdateStatus,
    VersionOutcome,
)
from steadyserve.core.strategies import strategy_of
from steadyserve.envs import build as environment_build
from steadyserve.envs import manifest
from steadyserve.envs.plan import PipSpec, built_setup, needs_environment
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
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.store import Store, VersionRow
from steadyserve.wire.replica_contract import SETUP_MARKER

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller
    from steadyserve.controller.runtime import ServiceRuntime

log = logging.getLogger("steadyserve.controller")


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
    """Read the new version's files, describe the update (update_plan.py, pure), and
    unless it is a dry run or changes nothing, commit it.

    ``keep_files``: the new version has the current version's files, as they are
    stored (``steady jobs pool apply --workers N``, which names no file): the
    spec's workdir is not read again, so neither an edit made there since nor
    the service file itself (which no file names for exclusion) makes a change."""
    store, home, name = controller.store, controller.home, runtime.name
    check_unchangeable(runtime.spec, spec, runtime.row.port)
    current = store.version(name, runtime.row.version)
    assert current is not None
    files = await _new_files(home, runtime, current, spec, source_workdir, spec_file, keep_files)
    plan = describe_update(
        runtime.spec,
        spec,
        old_hash=files.old_hash,
        new_hash=files.hash,
        requested_mode=mode,
        replicas=runtime.views(),
        next_version=store.latest_version_number(name) + 1,
        in_place_possible=runtime.rollout.takes_in_place(),
    )
    result = plan.reply(name, runtime.row.version, dry_run)
    current_files = home.version_workdir(name, runtime.row.version)
    for change in result["changes"]:
        both = bool(change["old"] and change["new"]) and current_files.is_dir()
        if change["path"] == "workdir" and both and files.source is not None:
            # The files, not two content hashes (envs/workdir_diff.py).
            old = files.recorded
            change["files"] = await asyncio.to_thread(
                workdir_diff, current_files, files.source, files.exclude, old_manifest=old
            )
    if plan.changes.empty:
        return result
    if strategy_of(plan.mode).doubles:
        _check_blue_green_fits(runtime, spec, plan.mode_field)
    if dry_run:
        return result
    result["version"] = await _commit(
        controller, runtime, spec, spec_yaml, plan, files, current, rollback_to
    )
    return result


@dataclass(frozen=True)
class _Files:
    """Where the new version's files come from, what is left out, and their hash;
    and the current version's hash with the same files left out, to compare with."""

    source: Path | None
    exclude: set[str]
    hash: str | None
    kept: bool
    """The current version's stored files, as they are (``keep_files``)."""
    old_hash: str | None
    recorded: manifest.Manifest
    """What the current version's copy held when taken (envs/manifest.py)."""


async def _new_files(
    home: Home,
    runtime: ServiceRuntime,
    current: VersionRow,
    spec: ServiceSpec,
    source_workdir: Path | None,
    spec_file: str | None,
    keep_files: bool,
) -> _Files:
    kept = home.version_workdir(runtime.name, runtime.row.version)
    recorded = manifest.read(home.version_dir(runtime.name, runtime.row.version))
    if keep_files:
        source = kept if current.workdir_hash is not None and kept.is_dir() else None
        left_out = set(recorded.left_out)
        return _Files(source, left_out, current.workdir_hash, True, current.workdir_hash, recorded)
    source = source_workdir or (Path(spec.workdir) if spec.workdir else None)
    # The service files of both versions are left out of both sides (envs/manifest.py).
    exclude = set(recorded.left_out) | relative_excludes(source, [spec_file] if spec_file else [])
    new_hash = await hash_workdir(source, exclude, home) if source is not None else None
    old_hash = await asyncio.to_thread(
        manifest.old_hash, kept, recorded, exclude, current.workdir_hash
    )
    return _Files(source, exclude, new_hash, False, old_hash, recorded)


async def _commit(
    controller: Controller,
    runtime: ServiceRuntime,
    spec: ServiceSpec,
    spec_yaml: str,
    plan: UpdatePlan,
    files: _Files,
    current: VersionRow,
    rollback_to: int | None,
) -> int:
    """The update's I/O: the new version's snapshot and row, then the rollout begins
    and old versions are pruned. Returns the new version's number."""
    store, home, name = controller.store, controller.home, runtime.name
    number = store.latest_version_number(name) + 1
    message = plan.changes.describe()
    if rollback_to is not None:
        message = f"rollback to version {rollback_to}: {message}"
    # Never leave files of a version that was not recorded: a full disk can fail the
    # snapshot, its manifest or the row, and each leaves the folder half-written.
    try:
        workdir_hash = await take_snapshot(
            home, name, number, files.source, files.exclude, None if files.kept else files.hash
        )
        if files.kept:  # the copy may hold setup's output; the files are the current ones
            workdir_hash = current.workdir_hash
        if plan.in_place and not runtime.rollout.takes_in_place():
            # An abort or a rollback came while the files were copied: the service
            # converges again, so the change restarts (simulator seed 385).
            plan = plan.restarting(spec)
        old_marker = home.version_dir(name, runtime.row.version) / SETUP_MARKER
        if plan.in_place and old_marker.exists():  # setup is unchanged: it already ran
            (home.version_dir(name, number) / SETUP_MARKER).touch()
        store.add_version(
            VersionRow(
                service=name,
                version=number,
                created_at=runtime.clock.wall(),
                spec_json=spec.spec_json(),
                spec_yaml=spec_yaml,
                workdir_hash=workdir_hash,
                mode=plan.mode,
                changes=message,
                outcome=VersionOutcome.IN_PROGRESS,
                base_version=runtime.row.version if plan.in_place else None,
            )
        )
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, home.version_dir(name, number), True)
        raise
    runtime.rollout.begin(number, spec, plan.mode, message, rollback=rollback_to is not None)
    await prune(store, home, runtime, spec.service.history_limit, keep=rollback_to)
    return number


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
        kept = _kept_versions(home, store)
        freed = await asyncio.to_thread(environment_build.prune_unused, home, kept)
    except OSError:  # unreclaimed space is not a reason to fail the command
        log.exception("could not delete unused environments")
        return
    if freed:
        log.info("deleted %d unused environments: %s", len(freed), [k[:16] for k in freed])


def _kept_versions(home: Home, store: Store) -> list[tuple[Path, str | None, PipSpec]]:
    """What every version whose files are kept needs an environment for (read
    from the store, so call it where the store lives)."""
    found: list[tuple[Path, str | None, PipSpec]] = []
    for service in store.services():
        for row in store.versions(service.name):
            if row.pruned:
                continue
            spec = ServiceSpec.from_json(row.spec_json)
            setup = built_setup(spec.setup, spec.service.pool is not None)  # workers run it
            if needs_environment(setup, spec.pip):
                workdir = home.version_workdir(service.name, row.version)
                found.append((workdir, setup, spec.pip))
    return found


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
