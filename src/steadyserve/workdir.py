"""Per-version snapshots of ``workdir``, with a content hash.

The hash is what an update compares: a workdir whose files did not change is
not a reason to restart replicas (SkyServe restarts on any workdir). Two kinds
of file are not part of the code: the service or fleet file being deployed
(users keep it beside the code and edit it to change ``user_config``), and
whatever ``.steadyignore`` lists (one glob a line, like ``.gitignore`` without
negation; matched against the relative path and each path component).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

IGNORE_FILE = ".steadyignore"


def _patterns(root: Path) -> list[str]:
    try:
        lines = (root / IGNORE_FILE).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [p.strip().rstrip("/") for p in lines if p.strip() and not p.startswith("#")]


def _ignored(rel: str, patterns: list[str], exclude: set[str]) -> bool:
    if rel in exclude:
        return True
    parts = rel.split("/")
    return any(
        fnmatch.fnmatch(rel, pat) or any(fnmatch.fnmatch(part, pat) for part in parts)
        for pat in patterns
    )


def relative_excludes(root: Path | None, files: Iterable[str | Path]) -> set[str]:
    """The given files that lie inside ``root``, as relative paths."""
    if root is None:
        return set()
    found = set()
    for file in files:
        try:
            found.add(Path(file).resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            continue
    return found


def _files(root: Path, exclude: set[str]) -> list[Path]:
    patterns = _patterns(root)
    chosen = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not _ignored((base / d).relative_to(root).as_posix(), patterns, exclude)
        )
        for filename in sorted(filenames):
            path = base / filename
            if not _ignored(path.relative_to(root).as_posix(), patterns, exclude):
                chosen.append(path)
    return chosen


def content_hash(root: Path, exclude: set[str] | None = None) -> str:
    """SHA-256 over every kept file's relative path, executable bit and bytes."""
    digest = hashlib.sha256()
    for path in _files(root, exclude or set()):
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"L" + os.readlink(path).encode())
            continue
        digest.update(b"X" if os.access(path, os.X_OK) else b"F")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def snapshot(source: Path | None, dest: Path, exclude: set[str] | None = None) -> str | None:
    """Copy ``source`` (less what is excluded) to ``dest`` atomically; return its hash."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    if source is not None:
        for path in _files(source, exclude or set()):
            target = tmp / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                os.symlink(os.readlink(path), target)
            else:
                shutil.copy2(path, target)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return content_hash(dest) if source is not None else None
