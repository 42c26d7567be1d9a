"""A pool's job queue, pure: job states, the table of allowed moves, and the
scheduler's choice of which pending job gets which idle worker.

Named as SkyPilot names a managed job's states (``sky jobs queue``). A job is
PENDING until a worker is idle, STARTING while its process is launched in that
worker's environment, RUNNING until the process exits (SUCCEEDED on 0, FAILED
otherwise) or ``steady jobs cancel`` stops it (CANCELLING, then CANCELLED). A
pending job whose pool goes down is CANCELLED without ever running. One job per
worker at a time, first come first served (SkyPilot's pools do the same).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from steadyserve.core.states import StrEnum


class JobStatus(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_JOB_STATES

    @property
    def holds_worker(self) -> bool:
        """A job whose process is (or is about to be) on a worker: that worker is busy."""
        return self in (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING)


_J = JobStatus
TERMINAL_JOB_STATES = frozenset({_J.SUCCEEDED, _J.FAILED, _J.CANCELLED})

JOB_MOVES: Mapping[JobStatus, frozenset[JobStatus]] = MappingProxyType(
    {
        _J.PENDING: frozenset({_J.STARTING, _J.CANCELLED}),
        # FAILED from STARTING: the process could not be started (its worker went).
        _J.STARTING: frozenset({_J.RUNNING, _J.FAILED, _J.CANCELLING}),
        _J.RUNNING: frozenset({_J.SUCCEEDED, _J.FAILED, _J.CANCELLING}),
        # A job asked to stop may still end by itself before the signal lands.
        _J.CANCELLING: frozenset({_J.CANCELLED, _J.SUCCEEDED, _J.FAILED}),
        _J.SUCCEEDED: frozenset(),
        _J.FAILED: frozenset(),
        _J.CANCELLED: frozenset(),
    }
)
"""The one table of job state changes; :func:`check_job_move` refuses every other."""


class IllegalJobMove(RuntimeError):
    """A job state change the table does not allow: a controller bug, never input."""


def check_job_move(old: JobStatus, new: JobStatus) -> None:
    if new not in JOB_MOVES[old]:
        raise IllegalJobMove(f"job state {old} -> {new} is not an allowed move")


def ended_as(exit_code: int, cancelled: bool) -> JobStatus:
    """A job's state once its process exited: asked to stop is CANCELLED whatever
    the code (a signal's), else 0 is SUCCEEDED and anything else FAILED."""
    if cancelled:
        return JobStatus.CANCELLED
    return JobStatus.SUCCEEDED if exit_code == 0 else JobStatus.FAILED


@dataclass(frozen=True)
class JobView:
    """What the scheduler needs of a job: its id, state and worker (if any)."""

    id: int
    status: JobStatus
    worker: int | None = None


def assign(jobs: Iterable[JobView], ready_workers: Iterable[int]) -> list[tuple[int, int]]:
    """``(job, worker)`` pairs to start now: the oldest pending jobs (lowest id)
    on the idle ready workers (lowest id first), one job per worker.

    Worked example: workers 1, 2 ready; job 7 RUNNING on 1; jobs 8, 9 PENDING:
    worker 2 is the only idle one, so [(8, 2)]; job 9 waits for the next idle worker.
    """
    jobs = list(jobs)
    busy = {j.worker for j in jobs if j.status.holds_worker and j.worker is not None}
    idle = sorted(w for w in set(ready_workers) if w not in busy)
    pending = sorted(j.id for j in jobs if j.status is JobStatus.PENDING)
    return list(zip(pending, idle, strict=False))


def busy_workers(jobs: Iterable[JobView]) -> frozenset[int]:
    """Workers holding a job: never taken away by a scale-down."""
    return frozenset(j.worker for j in jobs if j.status.holds_worker and j.worker is not None)
