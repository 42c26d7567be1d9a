"""``steady logs``: read (and follow) the log files under STEADY_HOME."""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from pathlib import Path

FOLLOW_POLL_S = 0.2


def tail_lines(path: Path, count: int | None) -> bytes:
    """The last ``count`` lines of a file (all when None) without reading it twice."""
    with open(path, "rb") as handle:
        if count is None:
            return handle.read()
        return b"".join(deque(handle, maxlen=count)) if count > 0 else b""


def show(path: Path, tail: int | None, follow: bool, stop_when: float | None = None) -> None:
    """Print the file's tail; with ``follow``, keep printing what is appended."""
    out = sys.stdout.buffer
    out.write(tail_lines(path, tail))
    out.flush()
    if not follow:
        return
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        while stop_when is None or time.monotonic() < stop_when:
            chunk = handle.read(65536)
            if chunk:
                out.write(chunk)
                out.flush()
            else:
                time.sleep(FOLLOW_POLL_S)
