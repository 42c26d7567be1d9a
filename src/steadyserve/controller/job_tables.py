"""The job queue of every pool, a table of the controller's SQLite file.

One row per job submitted with ``steady jobs launch --pool``: its ``run``, its
state (core/jobs.py), the worker it got and its process. Written through the
:class:`~steadyserve.store.Store` (its connection, its transactions), and every
state change is checked against ``jobs.JOB_MOVES``, so a restarted controller
finds each job where it was. Rows outlive their pool, as SkyPilot's
``sky jobs queue`` lists jobs of pools already down; ids are never reused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from steadyserve.core.jobs import JobStatus, check_job_move
from steadyserve.store import Store

_SCHEMA = """CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    run TEXT NOT NULL,
    envs TEXT NOT NULL DEFAULT '{}',
    worker INTEGER,
    pid INTEGER,
    pid_create_time REAL,
    exit_code INTEGER,
    reason TEXT NOT NULL DEFAULT '',
    submitted_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL
)"""

_COLUMNS = (
    "id, pool, name, status, run, envs, worker, pid, pid_create_time, exit_code, reason,"
    " submitted_at, started_at, ended_at"
)
_SETTABLE = frozenset({"worker", "pid", "pid_create_time", "exit_code", "started_at", "ended_at"})


@dataclass
class JobRow:
    id: int
    pool: str
    name: str
    status: JobStatus
    run: str
    envs: dict[str, str] = field(default_factory=dict)
    worker: int | None = None
    pid: int | None = None
    pid_create_time: float | None = None
    exit_code: int | None = None
    reason: str = ""
    submitted_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """What ``steady jobs queue --json`` and the API show (never ``envs``'s values)."""
        return {
            "id": self.id,
            "pool": self.pool,
            "name": self.name,
            "status": str(self.status),
            "worker": self.worker,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


def _row(values: tuple[Any, ...]) -> JobRow:
    (jid, pool, name, status, run, envs, worker, pid, ctime, code, reason, sub, start, end) = values
    return JobRow(
        id=jid,
        pool=pool,
        name=name,
        status=JobStatus(status),
        run=run,
        envs=json.loads(envs),
        worker=worker,
        pid=pid,
        pid_create_time=ctime,
        exit_code=code,
        reason=reason,
        submitted_at=sub,
        started_at=start,
        ended_at=end,
    )


class JobTable:
    """Jobs of every pool, on the store's one connection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        with store.transaction():
            store.execute(_SCHEMA)

    def add(self, pool: str, name: str, run: str, envs: dict[str, str], now: float) -> JobRow:
        rows = self.store.execute(
            "INSERT INTO jobs (pool, name, status, run, envs, reason, submitted_at)"
            f" VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING {_COLUMNS}",
            (
                pool,
                name,
                str(JobStatus.PENDING),
                run,
                json.dumps(envs),
                "waiting for a worker",
                now,
            ),
        )
        return _row(rows[0])

    def get(self, job_id: int) -> JobRow | None:
        rows = self.store.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _row(rows[0]) if rows else None

    def of_pool(self, pool: str, *, live: bool = False) -> list[JobRow]:
        """The pool's jobs, oldest first; ``live``: only those not ended."""
        rows = [
            _row(r)
            for r in self.store.execute(
                f"SELECT {_COLUMNS} FROM jobs WHERE pool = ? ORDER BY id", (pool,)
            )
        ]
        return [r for r in rows if not r.status.is_terminal] if live else rows

    def all(self) -> list[JobRow]:
        return [_row(r) for r in self.store.execute(f"SELECT {_COLUMNS} FROM jobs ORDER BY id")]

    def set_process(
        self, job: JobRow, pid: int | None, create_time: float | None, now: float
    ) -> None:
        """The process of a job cancelled while it was launched: held, then stopped."""
        self.store.execute(
            "UPDATE jobs SET pid = ?, pid_create_time = ?, started_at = ? WHERE id = ?",
            (pid, create_time, now, job.id),
        )
        job.pid, job.pid_create_time, job.started_at = pid, create_time, now

    def move(self, job: JobRow, new: JobStatus, reason: str, **values: Any) -> None:
        """The one way a job's state changes: checked against ``JOB_MOVES``, written,
        and mirrored on ``job``."""
        check_job_move(job.status, new)
        unknown = set(values) - _SETTABLE
        if unknown:
            raise ValueError(f"not a job column: {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in ("status", "reason", *values))
        self.store.execute(
            f"UPDATE jobs SET {sets} WHERE id = ?", (str(new), reason, *values.values(), job.id)
        )
        job.status, job.reason = new, reason
        for key, value in values.items():
            setattr(job, key, value)
