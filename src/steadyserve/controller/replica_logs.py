"""Replica logs rotated by size, with a cap per replica and one per home.

A replica writes its own log file (``services/NAME/replicas/ID.log``, opened
``O_APPEND`` by the backend) and outlives the controller, which re-adopts it on a
restart: so the controller is never in a replica's output path, and rotation is
copy-and-truncate, as logrotate's ``copytruncate``. A file past ``max_bytes`` is
copied to ``ID.log.1`` (older copies move up to ``.2``, ``.3``; past ``backups``
the oldest goes) and truncated in place, where the replica's next append lands
at the new end. What the replica writes between the copy and the truncate is
lost: at most what it writes in that instant. When the rotated copies of all the
home's replicas pass ``home_cap`` the oldest copies go first. ``steady logs``
reads the copies and the file as one log (cli/logs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from steadyserve.home.paths import Home

log = logging.getLogger("steadyserve.controller")

CHECK_EVERY_S = 2.0


@dataclass(frozen=True)
class LogLimits:
    """How large replica logs may grow (docs/observability.md)."""

    max_bytes: int = 10 * 1024 * 1024
    backups: int = 3
    home_cap: int = 1024 * 1024 * 1024

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str] = os.environ) -> LogLimits:
        """``STEADY_REPLICA_LOG_MAX_BYTES``, ``_BACKUPS`` and ``_HOME_CAP``; a value
        that is not a positive whole number keeps the default, with a warning."""
        values: dict[str, int] = {}
        for field, var in (
            ("max_bytes", "STEADY_REPLICA_LOG_MAX_BYTES"),
            ("backups", "STEADY_REPLICA_LOG_BACKUPS"),
            ("home_cap", "STEADY_REPLICA_LOG_HOME_CAP"),
        ):
            raw = env.get(var)
            if raw is None:
                continue
            if raw.isdigit() and int(raw) > 0:
                values[field] = int(raw)
            else:
                log.warning("%s=%r is not a positive whole number: ignored", var, raw)
        return cls(**values)


def rotated(path: Path, backups: int | None = None) -> list[Path]:
    """The rotated copies of ``path`` that exist, oldest first."""
    found = []
    n = 1
    while backups is None or n <= backups:
        copy = path.with_name(f"{path.name}.{n}")
        if not copy.exists():
            break
        found.append(copy)
        n += 1
    return found[::-1]


def rotate(path: Path, limits: LogLimits) -> bool:
    """Copy-and-truncate ``path`` if it is past ``limits.max_bytes``; True if it was."""
    try:
        if path.stat().st_size <= limits.max_bytes:
            return False
    except FileNotFoundError:
        return False
    oldest = path.with_name(f"{path.name}.{limits.backups}")
    oldest.unlink(missing_ok=True)
    for n in range(limits.backups - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{n + 1}"))
    tmp = path.with_name(f"{path.name}.rotating")
    shutil.copyfile(path, tmp)
    os.chmod(tmp, 0o600)
    tmp.replace(path.with_name(f"{path.name}.1"))
    os.truncate(path, 0)
    return True


def rotate_home(home: Home, limits: LogLimits) -> int:
    """Rotate every replica log of ``home`` that is full, then hold the rotated
    copies under ``limits.home_cap`` (oldest first); how many files were rotated."""
    logs = sorted(home.root.glob("services/*/replicas/*.log"))
    count = 0
    for path in logs:
        try:
            count += rotate(path, limits)
        except OSError as exc:  # a full disk: try again next time, never crash the loop
            log.warning("could not rotate %s: %s", path, exc)
    copies = []
    for path in home.root.glob("services/*/replicas/*.log.*"):
        with contextlib.suppress(FileNotFoundError):
            info = path.stat()
            copies.append((info.st_mtime, info.st_size, path))
    total = sum(size for _, size, _ in copies)
    for _, size, path in sorted(copies):
        if total <= limits.home_cap:
            break
        path.unlink(missing_ok=True)
        total -= size
    return count


async def rotate_forever(home: Home, limits: LogLimits) -> None:
    """The controller's task: rotate the home's replica logs every few seconds."""
    while True:
        try:
            await asyncio.to_thread(rotate_home, home, limits)
        except Exception:
            log.exception("replica log rotation failed; trying again")
        await asyncio.sleep(CHECK_EVERY_S)
