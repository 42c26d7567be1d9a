"""Shrinking a failing schedule: delta debugging over its events (Zeller's ddmin).

The smallest list of events found that still violates the same invariant is what
a violation prints; it replays as it is (``python -m steadyserve.sim replay``).
"""

from __future__ import annotations

from collections.abc import Callable

from steadyserve.sim.schedule import Event, Schedule

MAX_RUNS = 200
"""Shrinking stops after this many trial runs (it keeps the smallest failure so far)."""


def shrink(schedule: Schedule, fails: Callable[[Schedule], bool]) -> Schedule:
    """A schedule with a subset of ``schedule``'s events for which ``fails`` still holds."""
    events = list(schedule.events)
    runs = 0
    n = 2
    while len(events) >= 2 and runs < MAX_RUNS:
        chunk = max(1, len(events) // n)
        reduced = False
        for start in range(0, len(events), chunk):
            candidate: list[Event] = events[:start] + events[start + chunk :]
            runs += 1
            if fails(schedule.with_events(candidate)):
                events = candidate
                n = max(n - 1, 2)
                reduced = True
                break
            if runs >= MAX_RUNS:
                break
        if not reduced:
            if n >= len(events):
                break
            n = min(len(events), n * 2)
    if len(events) == 1 and runs < MAX_RUNS and fails(schedule.with_events([])):
        events = []
    return schedule.with_events(events)
