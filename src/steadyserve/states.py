"""Replica and service states, named as SkyServe names them (docs/design.md, "States")."""

from __future__ import annotations

from enum import Enum


class ReplicaStatus(str, Enum):
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


class ServiceStatus(str, Enum):
    CONTROLLER_INIT = "CONTROLLER_INIT"
    REPLICA_INIT = "REPLICA_INIT"
    READY = "READY"
    NO_REPLICA = "NO_REPLICA"
    UPDATING = "UPDATING"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FAILED = "FAILED"
    FAILED_CLEANUP = "FAILED_CLEANUP"
