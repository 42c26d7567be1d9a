"""Which files a workdir change adds, removes and changes: what a plan shows for
``workdir`` instead of two content hashes.

The old side is the current version's snapshot (the entries it held when it
was taken, envs/manifest.py), the new side the folder the new spec names, read
as a snapshot reads it (``scan``: the same ignore files); the service files of
both versions are left out of both, so only files a replica can read are named.
Compared by kind, executable bit, link target and bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from steadyserve.envs import manifest
from steadyserve.envs.workdir import Entry, scan

LIMIT = 20
"""Names listed per kind; past it, the count says how many more."""
_BLOCK = 1 << 20


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _same(old_root: Path, old: Entry, new_root: Path, new: Entry) -> bool:
    if (old.kind, old.executable, old.link) != (new.kind, new.executable, new.link):
        return False
    if old.kind != "file":
        return True
    a, b = old_root / old.rel, new_root / new.rel
    if a.stat().st_size != b.stat().st_size:
        return False
    return _digest(a) == _digest(b)


def workdir_diff(
    old_root: Path,
    new_root: Path,
    exclude: set[str] | None = None,
    limit: int = LIMIT,
    old_manifest: manifest.Manifest | None = None,
) -> dict[str, Any]:
    """``{"added", "removed", "changed"}``: each the first ``limit`` paths, sorted,
    and ``counts`` with how many there are in all."""
    recorded = old_manifest or manifest.Manifest(frozenset(), None)
    kept = manifest.kept_entries(old_root, recorded, exclude or set())
    old = {e.rel: e for e in kept if e.kind != "dir"}
    new = {e.rel: e for e in scan(new_root, exclude) if e.kind != "dir"}
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(
        rel for rel in set(old) & set(new) if not _same(old_root, old[rel], new_root, new[rel])
    )
    return {
        "added": added[:limit],
        "removed": removed[:limit],
        "changed": changed[:limit],
        "counts": {"added": len(added), "removed": len(removed), "changed": len(changed)},
    }


def describe(files: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The plan table's OLD and NEW cells: ``- removed``, ``~ changed`` (old side)
    and ``+ added``, ``~ changed`` (new side), with ``... and N more`` past the limit."""
    counts = files["counts"]

    def lines(kind: str, mark: str) -> list[str]:
        shown = [f"{mark} {rel}" for rel in files[kind]]
        if counts[kind] > len(files[kind]):
            shown.append(f"{mark} ... and {counts[kind] - len(files[kind])} more")
        return shown

    changed = lines("changed", "~")
    return lines("removed", "-") + changed, lines("added", "+") + changed
