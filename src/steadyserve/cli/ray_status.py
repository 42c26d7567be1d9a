"""``steady status --format ray``: Ray Serve's ``serve status`` layout.

Scripts that parse ``serve status`` (YAML: ``applications`` -> ``deployments``
-> ``replica_states``) keep working. Services made from a Ray Serve config are
grouped by their application and named by their Ray deployment name; any other
service is shown as an application of its own name with one deployment.
Statuses map onto Ray's words (docs/ray-serve.md has the table).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

# SteadyServe replica status -> Ray Serve replica state.
REPLICA_STATES = {
    "PENDING": "STARTING",
    "PROVISIONING": "STARTING",
    "STARTING": "STARTING",
    "READY": "RUNNING",
    "NOT_READY": "RECOVERING",
    "SHUTTING_DOWN": "STOPPING",
}
# SteadyServe service status -> (Ray deployment status, Ray application status).
SERVICE_STATES = {
    "READY": ("HEALTHY", "RUNNING"),
    "UPDATING": ("UPDATING", "DEPLOYING"),
    "CONTROLLER_INIT": ("UPDATING", "DEPLOYING"),
    "REPLICA_INIT": ("UPDATING", "DEPLOYING"),
    "NO_REPLICA": ("UNHEALTHY", "UNHEALTHY"),
    "SHUTTING_DOWN": ("UPDATING", "DELETING"),
    "FAILED": ("DEPLOY_FAILED", "DEPLOY_FAILED"),
    "FAILED_CLEANUP": ("UNHEALTHY", "DEPLOY_FAILED"),
}
# The worst application status wins when an application has several deployments.
_APP_ORDER = ("DEPLOY_FAILED", "UNHEALTHY", "DELETING", "DEPLOYING", "RUNNING")


def ray_status(services: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"applications": {app: {status, route_prefix, deployments: {...}}}}``."""
    apps: dict[str, dict[str, Any]] = {}
    for svc in services:
        app_name = svc.get("application") or svc["name"]
        dep_name = svc.get("deployment") or svc["name"]
        dep_status, app_status = SERVICE_STATES.get(svc["status"], ("UNHEALTHY", "UNHEALTHY"))
        states = Counter(
            REPLICA_STATES[r["status"]] for r in svc["replicas"] if r["status"] in REPLICA_STATES
        )
        app = apps.setdefault(
            app_name,
            {
                "status": "RUNNING",
                "message": "",
                "last_deployed_time_s": None,
                "route_prefix": None,
                "deployments": {},
            },
        )
        if _APP_ORDER.index(app_status) < _APP_ORDER.index(app["status"]):
            app["status"] = app_status
        if svc.get("route_prefix"):
            app["route_prefix"] = svc["route_prefix"]
        deployed = _deployed_at(svc)
        if deployed is not None:
            app["last_deployed_time_s"] = max(app["last_deployed_time_s"] or 0.0, deployed)
        app["deployments"][dep_name] = {
            "status": dep_status,
            "replica_states": dict(sorted(states.items())),
            "message": _message(svc, dep_status),
            "service": svc["name"],
            "version": svc["version"],
        }
    return {"applications": apps, "target_capacity": None}


def _message(svc: dict[str, Any], dep_status: str) -> str:
    """Empty when healthy; else the failed replicas' reasons (a constructor's
    exception), as Ray's message carries the traceback, or the service's status."""
    if dep_status == "HEALTHY":
        return ""
    from steadyserve.serve.overview import failure_reason  # pure; the package only when needed

    return failure_reason(svc) or str(svc["status"])


def _deployed_at(svc: dict[str, Any]) -> float | None:
    launched = [r["launched_at"] for r in svc["replicas"] if r.get("launched_at")]
    return max(launched) if launched else None


def render(services: list[dict[str, Any]]) -> str:
    """The YAML ``serve status`` prints."""
    return yaml.safe_dump(ray_status(services), sort_keys=False, default_flow_style=False)
