"""Lifecycles as types: replica and service states (named as SkyServe names them,
docs/design.md "States"), update statuses and modes, version outcomes, event kinds.

The store reads and writes these enums, so no state is ever a bare string in the
controller. Each is a :class:`StrEnum` (an update's mode an interned string, as
strategies register their own): its value is what the database and the JSON API
carry, unchanged from the strings of earlier releases.

:data:`REPLICA_MOVES` is the one table of the replica state changes the
controller may make; :func:`check_move` refuses every other one. :data:`UPDATE_MOVES`
and :data:`OUTCOME_MOVES` are the same for an update's status and a version's
outcome (:func:`check_update_move`, :func:`check_outcome_move`), and
:data:`VERSION_STARTS` the outcomes a version starts with (:func:`check_version_start`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import ClassVar


class StrEnum(str, Enum):
    """A string-valued enum whose ``str()`` and format are its value (``enum.StrEnum``
    arrived in Python 3.11; this package supports 3.10)."""

    value: str

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class ReplicaStatus(StrEnum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    READY = "READY"
    NOT_READY = "NOT_READY"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FAILED = "FAILED"
    FAILED_INITIAL_DELAY = "FAILED_INITIAL_DELAY"
    FAILED_PROBING = "FAILED_PROBING"
    FAILED_PROVISION = "FAILED_PROVISION"
    PREEMPTED = "PREEMPTED"

    @property
    def is_failed(self) -> bool:
        return self in FAILED_REPLICA_STATES

    @property
    def is_live(self) -> bool:
        """A replica that holds (or is about to hold) a process and counts toward the target."""
        return self in LIVE_REPLICA_STATES

    @property
    def is_probed(self) -> bool:
        """A replica whose process runs and whose readiness the controller probes."""
        return self in PROBED_REPLICA_STATES

    @property
    def before_ready(self) -> bool:
        """Started (or starting) but never judged ready yet: a failure here judges the version."""
        return self in (ReplicaStatus.PROVISIONING, ReplicaStatus.STARTING)


FAILED_REPLICA_STATES = frozenset(
    {
        ReplicaStatus.FAILED,
        ReplicaStatus.FAILED_INITIAL_DELAY,
        ReplicaStatus.FAILED_PROBING,
        ReplicaStatus.FAILED_PROVISION,
        ReplicaStatus.PREEMPTED,
    }
)

LIVE_REPLICA_STATES = frozenset(
    {
        ReplicaStatus.PENDING,
        ReplicaStatus.PROVISIONING,
        ReplicaStatus.STARTING,
        ReplicaStatus.READY,
        ReplicaStatus.NOT_READY,
    }
)

PROBED_REPLICA_STATES = frozenset(
    {ReplicaStatus.STARTING, ReplicaStatus.READY, ReplicaStatus.NOT_READY}
)

# Any replica with a process (or about to have one) may fail for a reason that is not
# its own state's: it exits, a reconfigure is refused, it vanished while the
# controller was down.
_R = ReplicaStatus
REPLICA_MOVES: dict[ReplicaStatus, frozenset[ReplicaStatus]] = {
    _R.PENDING: frozenset({_R.PROVISIONING, _R.SHUTTING_DOWN, _R.FAILED_PROVISION, _R.FAILED}),
    _R.PROVISIONING: frozenset({_R.STARTING, _R.SHUTTING_DOWN, _R.FAILED_PROVISION, _R.FAILED}),
    # PREEMPTED: the node the replica ran on is gone (the Ray backend); not its fault.
    _R.STARTING: frozenset(
        {_R.READY, _R.SHUTTING_DOWN, _R.FAILED_INITIAL_DELAY, _R.FAILED, _R.PREEMPTED}
    ),
    _R.READY: frozenset(
        {_R.NOT_READY, _R.SHUTTING_DOWN, _R.FAILED_PROBING, _R.FAILED, _R.PREEMPTED}
    ),
    _R.NOT_READY: frozenset(
        {_R.READY, _R.SHUTTING_DOWN, _R.FAILED_PROBING, _R.FAILED, _R.PREEMPTED}
    ),
    # Only when its process vanished while no controller watched; else it is removed.
    _R.SHUTTING_DOWN: frozenset({_R.FAILED}),
    # A failed replica stays listed until the planner forgets it: no way back.
    **{failed: frozenset() for failed in FAILED_REPLICA_STATES},
    # ... except that a replica that failed (its probes, its process) because its
    # node died is recorded as PREEMPTED once the backend knows the node is gone.
    _R.FAILED: frozenset({_R.PREEMPTED}),
    _R.FAILED_PROBING: frozenset({_R.PREEMPTED}),
}
"""Every replica state change the controller may make (a new replica starts PENDING;
leaving the table, a replica is removed with a ``STOPPED`` event)."""


class IllegalMove(RuntimeError):
    """A replica state change the table does not allow: a controller bug, never input."""


def check_move(old: ReplicaStatus, new: ReplicaStatus) -> None:
    if new not in REPLICA_MOVES[old]:
        raise IllegalMove(f"replica state {old} -> {new} is not an allowed move")


class ServiceStatus(StrEnum):
    CONTROLLER_INIT = "CONTROLLER_INIT"
    REPLICA_INIT = "REPLICA_INIT"
    READY = "READY"
    NO_REPLICA = "NO_REPLICA"
    UPDATING = "UPDATING"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FAILED = "FAILED"
    FAILED_CLEANUP = "FAILED_CLEANUP"


class Desired(StrEnum):
    """What the user last asked of a service: a down is recorded before it is carried
    out, so a controller that dies mid-way finishes it on restart."""

    RUNNING = "running"
    DOWN = "down"


class UpdateStatus(StrEnum):
    IN_PROGRESS = "IN_PROGRESS"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ROLLED_BACK = "ROLLED_BACK"


class UpdateMode(str):
    """How a version is reached: ``initial`` (created by up), or by one of the update
    strategies (core/strategies/), each registered under its mode.

    A string, interned: ``UpdateMode("rolling") is UpdateMode.ROLLING``, and a name
    no strategy registered is a ValueError, so a row read from the store holds a
    known mode. A new strategy interns its mode when it registers
    (:meth:`named`); the built-in ones are named here."""

    _known: ClassVar[dict[str, UpdateMode]] = {}
    INITIAL: ClassVar[UpdateMode]
    IN_PLACE: ClassVar[UpdateMode]
    ROLLING: ClassVar[UpdateMode]
    BLUE_GREEN: ClassVar[UpdateMode]
    CANARY: ClassVar[UpdateMode]

    __slots__ = ()

    def __new__(cls, value: str) -> UpdateMode:
        known = cls._known.get(value)
        if known is None:
            raise ValueError(f"{value!r} is not an update mode")
        return known

    @classmethod
    def named(cls, value: str) -> UpdateMode:
        """The mode called ``value``, made known if it is new."""
        known = cls._known.get(value)
        if known is None:
            known = cls._known[value] = str.__new__(cls, value)
        return known

    def __repr__(self) -> str:
        return f"UpdateMode({str.__repr__(self)})"


UpdateMode.INITIAL = UpdateMode.named("initial")
UpdateMode.IN_PLACE = UpdateMode.named("in_place")
UpdateMode.ROLLING = UpdateMode.named("rolling")
UpdateMode.BLUE_GREEN = UpdateMode.named("blue_green")
UpdateMode.CANARY = UpdateMode.named("canary")

_U = UpdateStatus
UPDATE_START = _U.IN_PROGRESS
"""The status every update row is added with."""
UPDATE_MOVES: Mapping[UpdateStatus, frozenset[UpdateStatus]] = MappingProxyType(
    {
        # It converged; it failed (or was superseded); a rollback superseded it.
        _U.IN_PROGRESS: frozenset({_U.SUCCEEDED, _U.FAILED, _U.ROLLED_BACK}),
        # An update that ended stays ended: a new attempt is a new row.
        _U.SUCCEEDED: frozenset(),
        _U.FAILED: frozenset(),
        _U.ROLLED_BACK: frozenset(),
    }
)
"""Every update status change the controller may make (a new update starts
``IN_PROGRESS``, :data:`UPDATE_START`)."""


class VersionOutcome(StrEnum):
    """What became of a version; empty for versions recorded before outcomes existed."""

    NONE = ""
    IN_PROGRESS = "in progress"
    ACTIVE = "active"
    RETIRED = "retired"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


_O = VersionOutcome
VERSION_STARTS = frozenset({_O.IN_PROGRESS, _O.ACTIVE})
"""The outcomes a version row is added with: an update's target, or ``up``'s version."""
OUTCOME_MOVES: Mapping[VersionOutcome, frozenset[VersionOutcome]] = MappingProxyType(
    {
        # A version recorded before outcomes existed may be any of these when it ends.
        _O.NONE: frozenset({_O.ACTIVE, _O.RETIRED, _O.FAILED, _O.SUPERSEDED}),
        # Its update succeeded, failed (or was rolled back), was superseded by a
        # newer one, or the service was taken down before it ended; or an in-place
        # change joined its update, which then succeeded at the newer version.
        _O.IN_PROGRESS: frozenset({_O.ACTIVE, _O.FAILED, _O.SUPERSEDED, _O.CANCELLED, _O.RETIRED}),
        # A newer version succeeded, or a new life of the name (down, then up) began.
        _O.ACTIVE: frozenset({_O.RETIRED}),
        # A rollback makes a new version: an ended version's outcome is final.
        _O.RETIRED: frozenset(),
        _O.FAILED: frozenset(),
        _O.SUPERSEDED: frozenset(),
        _O.CANCELLED: frozenset(),
    }
)
"""Every version outcome change the controller may make (a version starts as one of
:data:`VERSION_STARTS`)."""


def check_update_move(old: UpdateStatus, new: UpdateStatus) -> None:
    if new not in UPDATE_MOVES[old]:
        raise IllegalMove(f"update status {old} -> {new} is not an allowed move")


def check_outcome_move(old: VersionOutcome, new: VersionOutcome) -> None:
    if new not in OUTCOME_MOVES[old]:
        raise IllegalMove(f"version outcome '{old}' -> '{new}' is not an allowed move")


def check_version_start(outcome: VersionOutcome) -> None:
    """A version row is added as one of :data:`VERSION_STARTS`; the legacy ``""`` is
    only ever read from a database older than outcomes."""
    if outcome not in VERSION_STARTS:
        raise IllegalMove(f"a new version with outcome '{outcome}' is not an allowed start")


class EventKind(StrEnum):
    """Event rows that are not a replica's or service's state: things that happened."""

    STOPPED = "STOPPED"
    DELETED = "DELETED"
    UPDATE_STARTED = "UPDATE_STARTED"
    UPDATE_SUCCEEDED = "UPDATE_SUCCEEDED"
    UPDATE_FAILED = "UPDATE_FAILED"
    UPDATE_ROLLED_BACK = "UPDATE_ROLLED_BACK"
    VERSION_BROKEN = "VERSION_BROKEN"
    AUTOSCALE = "AUTOSCALE"
    LB_PORT_BUSY = "LB_PORT_BUSY"
    LB_RUNNING = "LB_RUNNING"
    LB_RESTARTING = "LB_RESTARTING"
    LB_FAILED = "LB_FAILED"
    CANARY_STEP = "CANARY_STEP"
    CANARY_ANALYSIS = "CANARY_ANALYSIS"
    BLUE_GREEN = "BLUE_GREEN"
    WRONG_PORT = "WRONG_PORT"
    NOT_APPLICABLE = "NOT_APPLICABLE"
    SETUP_STOPPED = "SETUP_STOPPED"
    CAPACITY = "CAPACITY"
    ILLEGAL_MOVE = "ILLEGAL_MOVE"


EventState = ReplicaStatus | ServiceStatus | UpdateStatus | EventKind
"""What an event row's from/to columns hold."""


def update_event(status: UpdateStatus) -> EventKind:
    """The event that records an update ending with ``status``."""
    return EventKind(f"UPDATE_{status.value}")
