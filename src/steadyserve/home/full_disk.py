"""A full disk as one line that names the home and its free space.

SQLite says "database or disk is full" (``sqlite3.OperationalError``), Python
says ``[Errno 28] No space left on device``; the user needs neither's wording
but where the space ran out and how much is left. The controller's API answers
with this line (HTTP 507, exit 1), and so does a controller that cannot start.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


LOW_BYTES = 1 << 20
"""Below this much free space, an I/O error of the home is taken for a full disk
(SQLite reports a -shm it cannot grow as "disk I/O error", not "disk is full")."""


def is_full(exc: BaseException, root: Path | None = None) -> bool:
    """Whether ``exc`` (or what it was raised from) is the disk being full; with
    ``root``, also any I/O error while the disk holding ``root`` is nearly full."""
    if root is not None and isinstance(exc, (OSError, sqlite3.Error)):
        try:
            if shutil.disk_usage(root).free < LOW_BYTES:
                return True
        except OSError:
            pass
    seen: BaseException | None = exc
    for _ in range(10):  # a bounded walk of the cause chain
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
            return True
        if (
            isinstance(seen, sqlite3.Error)
            and getattr(seen, "sqlite_errorname", "") == "SQLITE_FULL"
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def free_text(root: Path) -> str:
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return "free space unknown"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if free >= size:
            return f"{free / size:.1f} {unit} free"
    return f"{free} bytes free"


def line(root: Path, what: str) -> str:
    """``the disk holding HOME is full (N free): WHAT failed, nothing changed``."""
    return f"the disk holding {root} is full ({free_text(root)}): {what}"
