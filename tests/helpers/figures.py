"""Figures the tests measured (requests sent/failed, faults injected), shown in a
summary section at the end of the run even when pytest captures output."""

from __future__ import annotations

import os

FIGURES: list[str] = []


def report(line: str) -> None:
    """Record one figure; a test run on the Ray backend (its id ends ``[ray]``) is
    labelled so, next to the same figure on the local backend."""
    on_ray = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].endswith("[ray]")
    FIGURES.append(("[ray backend] " if on_ray else "") + line.strip())
