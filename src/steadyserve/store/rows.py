"""The state database's rows as typed values: what the store (database.py) reads and writes.

Columns become the lifecycle enums of ``steadyserve.core.states`` here, at the
boundary, and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from steadyserve.core.states import (
    Desired,
    ReplicaStatus,
    ServiceStatus,
    UpdateMode,
    UpdateStatus,
    VersionOutcome,
)


@dataclass
class ServiceRow:
    name: str
    status: ServiceStatus
    version: int
    created_at: float
    port: int
    lb_pid: int | None = None
    lb_create_time: float | None = None
    next_replica_id: int = 1
    desired: Desired = Desired.RUNNING
    purge: int = 0
    stable_version: int = 1
    owner: str = ""
    """Who made the service: ``""`` for ``steady up``, ``"fleet:<absolute path>"``
    for a fleet file. ``steady deploy`` takes down only what its own file made."""

    def __post_init__(self) -> None:
        self.status = ServiceStatus(self.status)
        self.desired = Desired(self.desired)


@dataclass
class VersionRow:
    service: str
    version: int
    created_at: float
    spec_json: str
    spec_yaml: str
    workdir_hash: str | None = None
    mode: UpdateMode = UpdateMode.INITIAL
    changes: str = ""
    outcome: VersionOutcome = VersionOutcome.NONE
    base_version: int | None = None
    """For an in-place version: the version it was applied onto, whose folder its
    relabelled replicas still run in (so that folder is kept while they run)."""
    pruned: int = 0
    """1 once ``history_limit`` pruned this version's files: it stays in history,
    but cannot be rolled back to."""
    served: int = 0
    """1 once the version served (a replica of it READY, or the processes of a version
    that served relabelled to it in place): never judged broken after, also by a
    restarted controller that lists none of those replicas (simulator seed 67)."""

    def __post_init__(self) -> None:
        self.mode = UpdateMode(self.mode)
        self.outcome = VersionOutcome(self.outcome)


@dataclass
class ReplicaRow:
    service: str
    id: int
    version: int
    status: ReplicaStatus
    launched_at: float
    ip: str = "127.0.0.1"
    port: int | None = None
    pid: int | None = None
    pid_create_time: float | None = None
    ready_at: float | None = None
    control_port: int | None = None
    assignment: str | None = None
    """The GPUs, pinned cores and fixed ports it holds (core/capacity.py
    ``Assignment`` as JSON), so a restarted controller holds the same ones."""
    netns: str | None = None
    """The replica's own network namespace (backends/netns.py), or None on the host's."""

    def __post_init__(self) -> None:
        self.status = ReplicaStatus(self.status)


@dataclass
class UpdateRow:
    id: int | None
    service: str
    mode: UpdateMode
    from_version: int
    to_version: int
    status: UpdateStatus
    message: str
    started_at: float
    finished_at: float | None = None
    stable_replicas: int | None = None
    """The stable version's size when the update started: a blue-green or canary
    update heals it back to this, never up to the new version's target (None: an
    update recorded by an older release)."""

    def __post_init__(self) -> None:
        self.mode = UpdateMode(self.mode)
        self.status = UpdateStatus(self.status)


@dataclass
class EventRow:
    """An event as recorded: its from/to columns are the value of an
    :data:`~steadyserve.core.states.EventState` (history may hold kinds of older releases)."""

    id: int
    service: str
    replica_id: int | None
    time: float
    from_status: str | None
    to_status: str
    reason: str
