"""Per-version snapshots of ``workdir``, with a content hash.

The hash is what an update compares: a workdir whose files did not change is
not a reason to restart replicas (SkyServe restarts on any workdir).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def content_hash(root: Path) -> str:
    """SHA-256 over every file's relative path, mode bit x and bytes, in sorted order."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
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


def snapshot(source: Path | None, dest: Path) -> str | None:
    """Copy ``source`` to ``dest`` atomically (empty dir when None); return its hash."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    if source is None:
        tmp.mkdir()
    else:
        shutil.copytree(source, tmp, symlinks=True)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return content_hash(dest) if source is not None else None
