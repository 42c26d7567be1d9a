"""``file_mounts`` as a local machine can honour them: a local source copied into the
version's workdir, at the remote path made relative; a cloud URL or a storage object
refused with one line naming the mount."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from steadyserve.spec.errors import _fail

_CLOUD_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)


def cloud_url_scheme(source: str) -> str | None:
    """``s3`` for ``s3://bucket/x``; None for a local path."""
    match = _CLOUD_URL.match(source)
    return match.group(1).lower() if match else None


def mount_destination(dest: str) -> str:
    """Where a mount lands inside the version's workdir copy: SkyPilot's remote path
    made relative (``/data/x`` -> ``data/x``, ``~/cache`` -> ``cache``)."""
    text = dest.strip()
    if text.startswith("~"):
        text = text[1:]
    parts = [p for p in Path(text).parts if p not in ("/", "", ".")]
    return str(Path(*parts)) if parts else ""


def check_file_mounts(mounts: dict[str, Any]) -> None:
    """Refuse what cannot be copied locally, one line naming the mount."""
    for dest, source in mounts.items():
        if not isinstance(source, str):
            raise _fail(
                f"{dest}: storage objects (source/store/mode) need a cloud;"
                " give a local path to copy it into the workdir"
            )
        scheme = cloud_url_scheme(source)
        if scheme is not None:
            raise _fail(
                f"{dest}: {source} is a cloud URL ({scheme}://); only local paths are copied"
                " here (download it in setup: instead)"
            )
        if ".." in Path(mount_destination(dest)).parts or not mount_destination(dest):
            raise _fail(f"{dest}: must name a path inside the replica's directory")
