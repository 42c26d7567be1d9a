"""A pool's job queue, pure: job states, the table of allowed moves, and the
scheduler's choice of which pending job gets which idle worker.

Named as SkyPilot names a managed job's states (``sky jobs queue``). A job is
PENDING until a worker is idle, STARTING while its process is launched in that
worker's environment, RUNNING until the process exits (SUCCEEDED on 0, FAILED
otherwise) or ``steady jobs cancel`` stops it (CANCELLING, then CANCELLED). A
pending job whose pool goes down is CANCELLED without ever running. One job per
worker at a time, first come first served (SkyPilot's pools do the same).

A job whose worker is lost (its process died, as a preempted machine's does) is
RECOVERING and starts again on another worker, as SkyPilot's managed jobs are
recovered; one that failed by itself is restarted only as its
``resources.job_recovery`` allows (:func:`after_exit`, SkyPilot's
``max_restarts_on_errors`` and ``recover_on_exit_codes``).
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
    RECOVERING = "RECOVERING"
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

    @property
    def waits(self) -> bool:
        """A job waiting for a worker: new (PENDING) or to run again (RECOVERING)."""
        return self in (JobStatus.PENDING, JobStatus.RECOVERING)


_J = JobStatus
TERMINAL_JOB_STATES = frozenset({_J.SUCCEEDED, _J.FAILED, _J.CANCELLED})

JOB_MOVES: Mapping[JobStatus, frozenset[JobStatus]] = MappingProxyType(
    {
        _J.PENDING: frozenset({_J.STARTING, _J.CANCELLED}),
        # FAILED from STARTING: the process could not be started (its worker went).
        # RECOVERING from STARTING: its worker was lost before the process started.
        _J.STARTING: frozenset({_J.RUNNING, _J.FAILED, _J.CANCELLING, _J.RECOVERING}),
        # RECOVERING from RUNNING: its worker was lost, or job_recovery restarts it.
        _J.RUNNING: frozenset({_J.SUCCEEDED, _J.FAILED, _J.CANCELLING, _J.RECOVERING}),
        # A recovering job holds no process: it starts again, or a cancel ends it.
        _J.RECOVERING: frozenset({_J.STARTING, _J.CANCELLED}),
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


RECOVERY_STRATEGIES = ("EAGER_NEXT_REGION", "FAILOVER")
"""SkyPilot's recovery strategies, its default first: both mean "another worker
of the pool" here (they choose a region or zone in SkyPilot)."""
DEFAULT_RECOVERY_STRATEGY = RECOVERY_STRATEGIES[0]


@dataclass(frozen=True)
class JobRecovery:
    """SkyPilot's ``resources.job_recovery`` of a job: how often a job that failed
    by itself (its worker alive) runs again. A lost worker is always recovered,
    uncounted, as SkyPilot recovers a preempted cluster."""

    max_restarts_on_errors: int = 0
    recover_on_exit_codes: frozenset[int] = frozenset()
    """Exit codes that always restart the job, uncounted by ``max_restarts_on_errors``."""
    strategy: str = DEFAULT_RECOVERY_STRATEGY
    """Kept as the file named it (one of :data:`RECOVERY_STRATEGIES`), shown in ``--json``."""

    def to_json(self) -> dict[str, object]:
        return {
            "strategy": self.strategy,
            "max_restarts_on_errors": self.max_restarts_on_errors,
            "recover_on_exit_codes": sorted(self.recover_on_exit_codes),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> JobRecovery:
        restarts = data.get("max_restarts_on_errors", 0)
        codes = data.get("recover_on_exit_codes", [])
        strategy = data.get("strategy", DEFAULT_RECOVERY_STRATEGY)  # absent in rows of older files
        assert isinstance(restarts, int) and isinstance(codes, list)
        assert isinstance(strategy, str)
        return cls(restarts, frozenset(int(c) for c in codes), strategy)


def restart_on_failure(
    exit_codes: Iterable[int] | None, recovery: JobRecovery, restarts: int
) -> tuple[bool, int]:
    """Whether a job that failed by itself runs again, and its count of failures
    afterwards: SkyPilot's ``StrategyExecutor.should_restart_on_failure``, with
    its counting. An exit code among ``recover_on_exit_codes`` restarts it and is
    not counted; any other failure is counted first, then compared, so the count
    grows on a refused restart too and ``max_restarts_on_errors: 0`` restarts
    nothing. ``exit_codes`` are its processes' (one here; SkyPilot's jobs on
    several nodes have one a node, and any match counts).

    Worked example: max_restarts_on_errors 2, exits 3, 3, 3: (True, 1),
    (True, 2), (False, 3).
    """
    if any(code in recovery.recover_on_exit_codes for code in exit_codes or ()):
        return True, restarts
    restarts += 1
    return restarts <= recovery.max_restarts_on_errors, restarts


@dataclass(frozen=True)
class Outcome:
    """What becomes of a job whose process ended: its state, the reason its event
    carries, and its count of failures (:func:`restart_on_failure`) from now on."""

    status: JobStatus
    reason: str
    restarts: int


def after_exit(
    code: int | None,
    *,
    cancelled: bool,
    worker_lost: str | None,
    recovery: JobRecovery,
    restarts: int,
) -> Outcome:
    """A job's next state once its process ended with ``code`` (None: it left none).

    ``worker_lost`` says why its worker is gone, when it is: then the job is
    RECOVERING whatever the code but 0, with no limit and uncounted (SkyPilot
    recovers a preempted job however often it is preempted). Else, as SkyPilot's
    managed jobs do: 0 SUCCEEDED; any other code RECOVERING or FAILED as
    :func:`restart_on_failure` says (``restarts``: failures counted so far).

    Worked example: max_restarts_on_errors 2, a job exiting 3 every time:
    RECOVERING (restart 1 of 2), RECOVERING (restart 2 of 2), then FAILED, with
    3 failures counted.
    """
    if cancelled:
        return Outcome(JobStatus.CANCELLED, "cancelled", restarts)
    said = f"exited with code {code}" if code is not None else "its process was lost"
    if code == 0:
        return Outcome(JobStatus.SUCCEEDED, said, restarts)
    if worker_lost is not None:
        why = f"{said}: {worker_lost}; recovering on a worker"
        return Outcome(JobStatus.RECOVERING, why, restarts)
    again, counted = restart_on_failure(() if code is None else (code,), recovery, restarts)
    limit = recovery.max_restarts_on_errors
    if again and counted == restarts:
        why = f"{said}, one of recover_on_exit_codes: restarting"
        return Outcome(JobStatus.RECOVERING, why, counted)
    if again:
        why = f"{said}: restart {counted} of {limit} (max_restarts_on_errors)"
        return Outcome(JobStatus.RECOVERING, why, counted)
    if limit:
        said += f" after {limit} restart{'' if limit == 1 else 's'} (max_restarts_on_errors)"
    return Outcome(JobStatus.FAILED, said, counted)


@dataclass(frozen=True)
class JobView:
    """What the scheduler needs of a job: its id, state and worker (if any)."""

    id: int
    status: JobStatus
    worker: int | None = None


def assign(jobs: Iterable[JobView], ready_workers: Iterable[int]) -> list[tuple[int, int]]:
    """``(job, worker)`` pairs to start now: the recovering jobs first (they ran
    already), then the oldest pending ones (lowest id), on the idle ready workers
    (lowest id first), one job per worker.

    Worked example: workers 1, 2 ready; job 7 RUNNING on 1; jobs 8, 9 PENDING:
    worker 2 is the only idle one, so [(8, 2)]; job 9 waits for the next idle worker.
    """
    jobs = list(jobs)
    busy = {j.worker for j in jobs if j.status.holds_worker and j.worker is not None}
    idle = sorted(w for w in set(ready_workers) if w not in busy)
    waiting = sorted((j.status is not JobStatus.RECOVERING, j.id) for j in jobs if j.status.waits)
    pending = [job_id for _, job_id in waiting]
    return list(zip(pending, idle, strict=False))


def busy_workers(jobs: Iterable[JobView]) -> frozenset[int]:
    """Workers holding a job: never taken away by a scale-down."""
    return frozenset(j.worker for j in jobs if j.status.holds_worker and j.worker is not None)
