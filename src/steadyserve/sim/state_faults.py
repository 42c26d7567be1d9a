"""The state file lost while the controller is down, and what its recovery must keep.

A ``state_loss`` fault kills the controller, then empties the SQLite file or tears
it in half (really, on the file: the run's home is on /dev/shm) before the next
controller starts; that one recovers it from its backups (controller/recovery.py,
controller/backups.py) as the real entry does. What docs/behaviour.md ("The home's
faults") promises of it is judged here and in sim/checks.py:

- a good backup exists (the controller takes one at every start), so the
  controller starts: a refusal violates ``recovery``;
- "What a restore can lose is at most the last 2 s": every event recorded more
  than ``backups.EVERY_S`` and one step before the loss is in the restored state
  as it was, or ``recovery`` is violated;
- "served throughout" when the restored state lists every replica that runs and
  each listed one runs; else "until the replacements are READY, fewer replicas
  are routed (none if every listed one is gone)": :func:`shortfall` says which, and
  the ``availability`` check excuses failures only in the second case, only
  until the service is whole again;
- a process started since the backup that the restore could not list (its version
  or its service was lost too) is a stray: left running and reported, never
  stopped; ``ends`` accepts it only when the controller reported it, by a
  ``STRAY_PROCESS`` event of its service or, when the state did not list that
  service, by the line in its log (:class:`StrayLines`).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from steadyserve.controller import backups
from steadyserve.core.states import ReplicaStatus
from steadyserve.home.paths import Home
from steadyserve.sim.invariants import StateWatch
from steadyserve.sim.schedule import STEP_S
from steadyserve.sim.world import SimBackend

if TYPE_CHECKING:
    from steadyserve.controller.runtime import ServiceRuntime
    from steadyserve.sim.runner import Run

CUTS = ("empty", "torn")
"""How a state file is lost: emptied (0 bytes), or cut to half its size."""

KEPT_S = backups.EVERY_S + STEP_S
"""A change older than this at the loss is in the backup (one is taken within
``EVERY_S`` of a change; one step, as the kill may land before that step's copy)."""

_WHEN = re.compile(r" of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


@dataclass(frozen=True)
class Loss:
    """A state file lost: how, and the events its restore must still hold."""

    cut: str
    upto: int
    """The newest event id recorded at least ``KEPT_S`` before the loss."""
    kept: list[tuple[object, ...]]


def lose_state(run: Run, cut: str) -> Loss:
    """Empty or tear the state file of the killed controller (every connection closed
    first: SQLite folds its write-ahead log into the file as the last one closes)."""
    bound = run.clock.now() - KEPT_S
    upto = max((event for at, event in run.event_marks if at <= bound), default=0)
    kept = run.watch.events(upto)
    run.watch.close()
    db = run.home.db_path
    size = db.stat().st_size
    with open(db, "r+b") as handle:
        handle.truncate(0 if cut == "empty" else size // 2)
    run.result.trace.append(f"  state file {cut}: {size} -> {db.stat().st_size} bytes")
    return Loss(cut, upto, kept)


def judge(run: Run, loss: Loss, notes: list[str]) -> None:
    """The restored state against the docs' promise (the ``recovery`` invariant), and
    whether it lost replicas of the run's service (the ``availability`` allowance)."""
    run.restores += 1
    run.result.trace.append(f"  {summary(notes, run.home)}")
    if not notes:
        run._violate("recovery", f"the {loss.cut} state file was taken for a sound one")
        return
    run.watch.reopen()
    # A new history from here: the ids of the events lost are handed out again.
    run.event_marks = [(run.clock.now(), run.watch.last_event)]
    lost = lost_events(loss, run.watch)
    if lost:
        run._violate("recovery", lost)
    run.short = shortfall(run.watch, run.backend, run.name)
    updates = max(run.watch.updates, default=0)
    versions = max((v for (s, v, _) in run.watch.outcomes if s == run.name), default=0)
    run.canaries.restored(updates, versions)


def lost_events(loss: Loss, watch: StateWatch) -> str | None:
    """What the restored state lost that it had to keep, or None."""
    restored = {row[0]: row for row in watch.events(loss.upto)}
    for row in loss.kept:
        if restored.get(row[0]) != row:
            return (
                f"the restored state lost event {row[0]} ({row[4]}: {row[5]}), recorded more"
                f" than {KEPT_S:g} s before the state file was {loss.cut}"
            )
    return None


def shortfall(watch: StateWatch, backend: SimBackend, service: str) -> dict[int, int]:
    """What the restored state must have READY again before ``service`` is whole, by
    version (as many replicas as it lists held), when it lost replicas: one it lists
    with a process is gone, or a replica process runs that it does not list (a stray,
    or an orphan the sweep stops). Empty when it lost none: then it serves throughout."""
    rows = watch.replicas(service).values()
    held = [(version, pid) for version, status, pid in rows if pid is not None and _held(status)]
    gone = any(not backend.alive(pid) for _, pid in held)
    running = {
        pid
        for pid, replica in backend.replicas.items()
        if backend.alive(pid) and replica.request.service == service
    }
    if not gone and not running - {pid for _, _, pid in rows}:
        return {}
    return dict(Counter(version for version, _ in held))


def whole(rt: ServiceRuntime, short: dict[int, int]) -> bool:
    """The replacements are READY: each version the restore lost replicas of that the
    service still wants has as many READY replicas as the restored state listed."""
    update = rt.rollout.update
    wanted = {rt.row.version}
    if rt.updating and update is not None:
        wanted |= {update.from_version, update.to_version}
    ready = Counter(r.version for r in rt.replicas.values() if r.status is ReplicaStatus.READY)
    return all(ready[v] >= n for v, n in short.items() if v in wanted)


def _held(status: str) -> bool:
    """A row whose process the controller holds (live, or draining)."""
    return ReplicaStatus(status).is_live or status == ReplicaStatus.SHUTTING_DOWN.value


def summary(notes: list[str], home: Home) -> str:
    """The recovery's log lines as a trace line: the same bytes on every replay."""
    text = "; ".join(notes).replace(str(home.root), "$STEADY_HOME")
    return "recovery: " + (_WHEN.sub("", text) or "the state file was found sound")


class StrayLines(logging.Handler):
    """The controller's log lines that report a stray (orphans.HomeProcess.report):
    how a stray of a service the state does not list is reported."""

    MARK = "runs but the state does not list it"

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if self.MARK in text:
            self.lines.append(text)
