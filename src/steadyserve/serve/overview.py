"""``serve.status()``: the controller's services in Ray Serve's ``ServeStatus`` shape.

Services that belong to an application (a ``serve.run`` or a ``serve_config.yaml``
deploy) are grouped by it; each is one deployment. States map to Ray's words:
a service READY on one version is a HEALTHY deployment, one mid-update UPDATING,
one whose version failed (its replicas exited before they were ready, or its
update failed) DEPLOY_FAILED with the replicas' reasons (a constructor's
exception and the last lines of its traceback) as the message, as Ray shows the
constructor's traceback; its replicas count by Ray's replica states.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ApplicationStatus(str, Enum):
    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"


class DeploymentStatus(str, Enum):
    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"


class ReplicaState(str, Enum):
    STARTING = "STARTING"
    UPDATING = "UPDATING"
    RECOVERING = "RECOVERING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"


@dataclass
class DeploymentStatusOverview:
    status: DeploymentStatus
    status_trigger: str
    replica_states: dict[str, int]
    message: str = ""


@dataclass
class ApplicationStatusOverview:
    status: ApplicationStatus
    message: str
    last_deployed_time_s: float
    deployments: dict[str, DeploymentStatusOverview]


@dataclass
class ServeStatus:
    proxies: dict[str, str] = field(default_factory=dict)
    applications: dict[str, ApplicationStatusOverview] = field(default_factory=dict)
    target_capacity: float | None = None


_REPLICA_STATES = {
    "PENDING": ReplicaState.STARTING,
    "PROVISIONING": ReplicaState.STARTING,
    "STARTING": ReplicaState.STARTING,
    "READY": ReplicaState.RUNNING,
    "NOT_READY": ReplicaState.RECOVERING,
    "SHUTTING_DOWN": ReplicaState.STOPPING,
}


FAILED_REPLICAS = ("FAILED", "FAILED_INITIAL_DELAY", "FAILED_PROBING", "FAILED_PROVISION")
FAILED_UPDATES = ("FAILED", "ROLLED_BACK")


def failure_reason(svc: dict[str, Any]) -> str:
    """Why the service's newest version failed, from the service JSON: the reasons of
    its failed replicas (each once), its load balancer's failure, its update's message."""
    reasons: list[str] = []
    for replica in svc.get("replicas") or []:
        version = replica.get("version")
        if replica.get("status") in FAILED_REPLICAS and version in (None, svc.get("version")):
            reasons.append(str(replica.get("reason") or ""))
    reasons.append(str(svc.get("failure") or ""))
    update = svc.get("update") or {}
    if update.get("status") in FAILED_UPDATES:
        reasons.append(str(update.get("message") or ""))
    return "; ".join(dict.fromkeys(r for r in reasons if r))


def deployment_status(svc: dict[str, Any]) -> DeploymentStatusOverview:
    counts: dict[str, int] = {}
    for replica in svc.get("replicas") or []:
        state = _REPLICA_STATES.get(str(replica.get("status")))
        if state is not None:
            counts[state.value] = counts.get(state.value, 0) + 1
    raw = str(svc.get("status"))
    update = svc.get("update") or {}
    if raw == "FAILED" or update.get("status") in FAILED_UPDATES:
        status, trigger = DeploymentStatus.DEPLOY_FAILED, "REPLICA_STARTUP_FAILED"
        return DeploymentStatusOverview(status, trigger, counts, failure_reason(svc))
    if raw == "FAILED_CLEANUP":
        status, trigger = DeploymentStatus.UNHEALTHY, "HEALTH_CHECK_FAILED"
    elif raw == "READY" and update.get("status") in (None, "SUCCEEDED"):
        status, trigger = DeploymentStatus.HEALTHY, "CONFIG_UPDATE_COMPLETED"
    else:
        status, trigger = DeploymentStatus.UPDATING, "CONFIG_UPDATE_STARTED"
    return DeploymentStatusOverview(status, trigger, counts, str(update.get("message") or ""))


def serve_status(services: list[dict[str, Any]], gateway_port: int | None) -> ServeStatus:
    out = ServeStatus(proxies={"127.0.0.1": "HEALTHY"} if gateway_port else {})
    grouped: dict[str, list[dict[str, Any]]] = {}
    for svc in services:
        app = svc.get("application")
        if app:
            grouped.setdefault(str(app), []).append(svc)
    for app, members in sorted(grouped.items()):
        deployments = {str(s.get("deployment") or s["name"]): deployment_status(s) for s in members}
        states = {d.status for d in deployments.values()}
        if states & {DeploymentStatus.DEPLOY_FAILED, DeploymentStatus.UNHEALTHY}:
            status = ApplicationStatus.DEPLOY_FAILED
        elif states == {DeploymentStatus.HEALTHY}:
            status = ApplicationStatus.RUNNING
        else:
            status = ApplicationStatus.DEPLOYING
        started = [time.time() - float(s.get("uptime_s") or 0) for s in members]
        out.applications[app] = ApplicationStatusOverview(status, "", max(started), deployments)
    return out
