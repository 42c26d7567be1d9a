"""Where a relative path in a service file points: SkyPilot's rule (the current
directory) beside SteadyServe's own (the file's folder), both tried, so a SkyServe
task file and a file written for SteadyServe each mean what their authors meant."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Origin = Literal["absolute", "current directory", "file's folder"]


@dataclass(frozen=True)
class Resolved:
    path: Path
    origin: Origin


def resolve_path(
    text: str, *, file_dir: Path, cwd: Path | None, kind: Literal["dir", "any"]
) -> Resolved | None:
    """Where a relative path in a service file points, the way SkyPilot reads it.

    SkyPilot resolves ``workdir`` and ``file_mounts`` sources from the current
    directory (``workdir: examples/serve/http_server`` run from the repository's
    root); SteadyServe's own files were written relative to the file's folder
    (``workdir: .``). Both are tried. When both exist and differ, the file's folder
    wins, so a file that worked before keeps meaning what it meant; a SkyServe path
    like the one above exists only from the current directory, and is found there.
    The plan says which was used. ``cwd`` None (fleet files) means the file's
    folder only. None when nothing matches.
    """
    raw = Path(text).expanduser()
    if raw.is_absolute():
        return Resolved(raw.resolve(), "absolute") if _exists(raw, kind) else None
    in_folder = (file_dir / raw).resolve()
    if _exists(in_folder, kind):
        return Resolved(in_folder, "file's folder")
    in_cwd = (cwd / raw).resolve() if cwd is not None else None
    if in_cwd is not None and _exists(in_cwd, kind):
        return Resolved(in_cwd, "current directory")
    return None


def _exists(path: Path, kind: Literal["dir", "any"]) -> bool:
    try:
        return path.is_dir() if kind == "dir" else path.exists()
    except (OSError, ValueError):
        return False
