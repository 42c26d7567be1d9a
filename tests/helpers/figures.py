"""Figures the tests measured (requests sent/failed, faults injected), shown in a
summary section at the end of the run even when pytest captures output."""

from __future__ import annotations

FIGURES: list[str] = []


def report(line: str) -> None:
    FIGURES.append(line.strip())
