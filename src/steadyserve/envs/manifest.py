"""What a version's snapshot held when it was taken, and which service files it left out.

People keep their service files beside their code (``v1.yaml``, ``v2.yaml`` and
``server.py`` in one folder) and update from one file to the other. Each snapshot
leaves out the file being deployed, so without more a switch from ``v1.yaml`` to
``v2.yaml`` would look like a code change (``v1.yaml`` appears, ``v2.yaml`` goes)
and restart every replica for a ``user_config`` edit. So a version records the
service files it left out, and the next version leaves out those and its own:
the comparison is made with the same files left out on both sides. Only files
that were deployed as this service's file are left out, never every YAML file,
so a ``config.yaml`` the replica reads still counts.

The old side is hashed from the entries the snapshot held when it was taken (this
manifest), not from a new walk of its folder: replicas and ``setup`` run in that
folder and may have written files there since.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from steadyserve.envs.workdir import Entry, hash_entries, scan

MANIFEST = "workdir.json"
"""Beside the version's ``workdir`` folder (in the version's own folder)."""


@dataclass(frozen=True)
class Manifest:
    left_out: frozenset[str]
    """Workdir-relative paths of service files this version left out."""
    entries: tuple[Entry, ...] | None
    """What the snapshot held when taken; None for a version stored before manifests."""


def write(version_dir: Path, left_out: Iterable[str], entries: Iterable[Entry]) -> None:
    data = {
        "left_out": sorted(left_out),
        "entries": [[e.rel, e.kind, e.executable, e.link] for e in entries],
    }
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / MANIFEST).write_text(json.dumps(data), encoding="utf-8")


def read(version_dir: Path) -> Manifest:
    """The version's manifest; an empty one when it has none or it cannot be read
    (a version stored by an older release: nothing recorded as left out)."""
    try:
        data = json.loads((version_dir / MANIFEST).read_text(encoding="utf-8"))
        left_out = frozenset(str(rel) for rel in data["left_out"])
        entries = tuple(
            Entry(str(rel), str(kind), bool(executable), str(link))
            for rel, kind, executable, link in data["entries"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return Manifest(frozenset(), None)
    return Manifest(left_out, entries)


def kept_entries(root: Path, manifest: Manifest, exclude: set[str]) -> list[Entry]:
    """The snapshot's entries less ``exclude``: from the manifest when there is one,
    else from a walk of the folder."""
    if manifest.entries is None:
        return [e for e in scan(root) if e.rel not in exclude]
    return [e for e in manifest.entries if e.rel not in exclude]


def old_hash(root: Path, manifest: Manifest, exclude: set[str], recorded: str | None) -> str | None:
    """The current version's workdir hash with ``exclude`` left out, comparable with a
    new source hashed with the same files left out. ``recorded`` (the version's
    stored hash) when nothing more is left out than the version itself left out."""
    if recorded is None or exclude <= manifest.left_out or not root.is_dir():
        return recorded
    extra = exclude - manifest.left_out
    held = (
        {e.rel for e in manifest.entries}
        if manifest.entries is not None
        else {rel for rel in extra if (root / rel).is_file() or (root / rel).is_symlink()}
    )
    if not extra & held:  # the copy never held them: leaving them out changes nothing
        return recorded
    return hash_entries(root, kept_entries(root, manifest, exclude))
