"""The invariants a run checks after every step, each with a name a mutant targets.

- ``routing``: no request is routed to a replica that is not READY (or draining:
  out of the table, its drain not yet confirmed), nor to a version the canary's
  weight gives no traffic.
- ``drain``: no request is routed to a replica the controller already stopped (its
  drain was confirmed), and no replica is stopped while the load balancer still
  routes to it or has requests in flight on it.
- ``availability``: no request fails that a client of the real system would have
  seen succeed: with no fault, restart or load balancer restart lately, nothing
  fails, and ready capacity stays at least ``target - max_unavailable``.
- ``surge``: a rolling update never runs more than ``target + max_surge`` replicas.
- ``moves``: every replica state, update status and version outcome change, and
  every version's first outcome, is one the typed tables of core/states.py allow.
- ``agreement``: the runtime's replicas, version and update are the store's.
- ``ends``: every update ends (SUCCEEDED, FAILED, ROLLED_BACK) within a bound once
  faults stop, no version stays "in progress", and the service converges to one
  version at full strength with no orphan process (checked at a run's end); the
  only process the state may not list is a stray a state restored from its backup
  lost, reported as the docs promise (a ``STRAY_PROCESS`` event naming it).
- ``recovery``: a state file lost while the controller was down is recovered from
  its backup (the controller starts), and the restored state lost nothing older
  than the backups' period (``backups.EVERY_S``) and one step.
- ``shadow``: a canary whose answers differ above its shadow limit never gets client
  weight nor succeeds (but by ``steady promote``); its verdict counts only its own
  compared answers; no client is answered by the shadow target at weight 0
  (sim/checks_canary.py).
- ``analysis``: a failed verdict aborts its canary at once, back on the stable
  version, and the aborted version gets no client request after (sim/checks_canary.py).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from steadyserve.core.states import (
    OUTCOME_MOVES,
    REPLICA_MOVES,
    UPDATE_MOVES,
    UPDATE_START,
    VERSION_STARTS,
    ReplicaStatus,
    UpdateStatus,
    VersionOutcome,
)

INVARIANTS = (
    "routing",
    "drain",
    "availability",
    "surge",
    "moves",
    "agreement",
    "ends",
    "recovery",
    "shadow",
    "analysis",
)


@dataclass(frozen=True)
class Violation:
    invariant: str
    step: int
    what: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.invariant}: {self.what}"


Stored = tuple[dict[int, tuple[int, str, int | None]], int | None, tuple[int, str, int] | None]
"""A service as the state file holds it: replicas, version, latest update."""


class StateWatch:
    """Reads the state file (its own connection) for what changed since the last step."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.open = True
        self.last_event = 0
        self.updates: dict[int, str] = {}
        self.outcomes: dict[tuple[str, int, float], str] = {}
        """Every service's versions' outcomes, by (service, version, created_at)."""
        self._verdicts: list[str] = []
        self._seen: int | None = None  # the file's data_version at the last look
        self._stored: dict[str, Stored] = {}

    def look(self) -> bool:
        """Whether another connection (the controller's) committed to the file since
        the last look. Nineteen steps in twenty write nothing; the checks of such a
        step need not read the file again (SQLite's ``data_version``: one cheap
        query in place of five)."""
        (version,) = self.db.execute("PRAGMA data_version").fetchone()
        if version == self._seen:
            return False
        self._seen = version
        self._stored.clear()
        return True

    def stored(self, service: str) -> Stored:
        """``service``'s replicas, version and latest update as of the last :meth:`look`
        (read again only after a change: call it right after a look, with nothing
        awaited between)."""
        found = self._stored.get(service)
        if found is None:
            replicas, version = self.replicas(service), self.service_version(service)
            found = self._stored[service] = (replicas, version, self.latest_update(service))
        return found

    def close(self) -> None:
        self.db.close()
        self.open = False
        self._seen = None
        self._stored.clear()

    def reopen(self) -> None:
        """Read the state file anew (restored from a backup): what it holds is the
        baseline, its history before the loss was judged already."""
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.open = True
        self._seen = None
        self._stored.clear()
        row = self.db.execute("SELECT MAX(id) FROM events").fetchone()
        self.last_event = int(row[0] or 0)
        self.updates = dict(self.db.execute("SELECT id, status FROM updates"))
        self.outcomes = {
            (service, version, created): outcome
            for service, version, created, outcome in self.db.execute(
                "SELECT service, version, created_at, outcome FROM versions"
            )
        }

    def events(self, upto: int) -> list[tuple[object, ...]]:
        """The events up to id ``upto``, but their time (the store's wall clock)."""
        return self.db.execute(
            "SELECT id, service, replica_id, from_status, to_status, reason FROM events"
            " WHERE id <= ? ORDER BY id",
            (upto,),
        ).fetchall()

    def strays(self) -> str:
        """The text of the STRAY_PROCESS events: what the sweep reported left running."""
        rows = self.db.execute("SELECT reason FROM events WHERE to_status = 'STRAY_PROCESS'")
        return "\n".join(r for (r,) in rows)

    def replicas(self, service: str = "svc") -> dict[int, tuple[int, str, int | None]]:
        rows = self.db.execute(
            "SELECT id, version, status, pid FROM replicas WHERE service=?", (service,)
        )
        return {i: (v, s, p) for i, v, s, p in rows}

    def pids(self) -> set[int]:
        """The pid of every replica the state lists, of every service."""
        rows = self.db.execute("SELECT pid FROM replicas WHERE pid IS NOT NULL")
        return {int(pid) for (pid,) in rows}

    def services(self) -> list[str]:
        return [name for (name,) in self.db.execute("SELECT name FROM services ORDER BY name")]

    def service_version(self, service: str = "svc") -> int | None:
        row = self.db.execute("SELECT version FROM services WHERE name=?", (service,)).fetchone()
        return None if row is None else int(row[0])

    def latest_update(self, service: str = "svc") -> tuple[int, str, int] | None:
        row = self.db.execute(
            "SELECT id, status, to_version FROM updates WHERE service=? ORDER BY id DESC LIMIT 1",
            (service,),
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), int(row[2]))

    def verdicts(self) -> list[str]:
        """The canary verdicts the controller recorded up to the last :meth:`moves`
        (the analysis' ``passed: ...``, ``failed: ...``; the shadow step's
        ``shadow ...``), each once."""
        found, self._verdicts = self._verdicts, []
        return found

    def moves(self) -> list[str]:
        """Every change since the last call that the tables of moves do not allow."""
        bad: list[str] = []
        for eid, rid, old, new, reason in self.db.execute(
            "SELECT id, replica_id, from_status, to_status, reason FROM events WHERE id > ?"
            " ORDER BY id",
            (self.last_event,),
        ).fetchall():
            self.last_event = eid
            if new == "CANARY_ANALYSIS":
                self._verdicts.append(str(reason))
                continue
            if new == "ILLEGAL_MOVE":
                bad.append("the store recorded an illegal move")
                continue
            if (
                rid is None
                or old is None
                or old == new
                or old not in _REPLICA
                or new not in _REPLICA
            ):
                continue
            if ReplicaStatus(new) not in REPLICA_MOVES[ReplicaStatus(old)]:
                bad.append(f"replica {rid}: {old} -> {new}")
        for uid, status in self.db.execute("SELECT id, status FROM updates"):
            before = self.updates.get(uid)
            if (
                before is None
                and status != UPDATE_START
                and UpdateStatus(status) not in UPDATE_MOVES[UPDATE_START]
            ):
                bad.append(f"update {uid} started {status}")
            elif (
                before is not None
                and before != status
                and UpdateStatus(status) not in UPDATE_MOVES[UpdateStatus(before)]
            ):
                bad.append(f"update {uid}: {before} -> {status}")
            self.updates[uid] = status
        for service, version, created, outcome in self.db.execute(
            "SELECT service, version, created_at, outcome FROM versions"
        ):
            key = (service, version, created)  # a name freed and taken again starts at 1
            before = self.outcomes.get(key)
            if before is None and VersionOutcome(outcome) not in VERSION_STARTS:
                if not _reachable(VERSION_STARTS, VersionOutcome(outcome)):
                    bad.append(f"{service} version {version} started '{outcome}'")
            elif (
                before is not None
                and before != outcome
                and not _reachable({VersionOutcome(before)}, VersionOutcome(outcome))
            ):
                bad.append(f"{service} version {version}: '{before}' -> '{outcome}'")
            self.outcomes[key] = outcome
        return bad


_REPLICA = {s.value for s in ReplicaStatus}


def _reachable(
    starts: set[VersionOutcome] | frozenset[VersionOutcome], end: VersionOutcome
) -> bool:
    """``end`` is at most two allowed moves from one of ``starts`` (one step of a run
    may make two: an update that succeeds and is retired by the next at once)."""
    for start in starts:
        for middle in OUTCOME_MOVES[start]:
            if middle == end or end in OUTCOME_MOVES[middle]:
                return True
    return False
