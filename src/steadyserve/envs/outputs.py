"""Files ``setup`` adds to the workdir, kept with the environment it built.

``setup`` runs once per environment, in the workdir copy of the version that
first needed it. A later version that shares the environment (same ``setup``,
``pip`` and dependency files, other code) would otherwise lack what ``setup``
left in the workdir (a downloaded model, a generated file), which it had when
``setup`` ran once per version. So a build keeps a hard link to every file
``setup`` added (``envs/.../outputs/``), and each version that uses the
environment gets those its own copy lacks. Files ``setup`` changed rather than
added stay as the version's own code has them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

OUTPUTS = "outputs"
_SKIPPED = frozenset({"__pycache__"})


def listing(root: Path) -> set[str]:
    """Relative paths of the files and symlinks under ``root`` (byte-code caches aside)."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        kept = []
        for name in dirnames:
            if name in _SKIPPED:
                continue
            if (here / name).is_symlink():  # a link to a folder is an entry, not walked
                filenames.append(name)
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            found.add((here / name).relative_to(root).as_posix())
    return found


def _place(source: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        os.symlink(os.readlink(source), dest)
        return
    try:
        os.link(source, dest)
    except OSError:  # another filesystem, or links not allowed: a copy will do
        shutil.copy2(source, dest)


def keep(workdir: Path, before: set[str], outputs: Path) -> int:
    """Link what ``setup`` added to ``workdir`` (not in ``before``) into ``outputs``."""
    added = sorted(listing(workdir) - before)
    for rel in added:
        _place(workdir / rel, outputs / rel)
    return len(added)


def restore(outputs: Path, workdir: Path) -> int:
    """Give ``workdir`` the kept outputs it lacks; return how many."""
    if not outputs.is_dir():
        return 0
    placed = 0
    for rel in sorted(listing(outputs)):
        target = workdir / rel
        if os.path.lexists(target):
            continue
        try:
            _place(outputs / rel, target)
        except OSError:  # a file where a folder should be: the version's code wins
            continue
        placed += 1
    return placed
