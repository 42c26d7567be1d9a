"""One Ray Serve deployment (its options and the config's overrides) -> one
service document. Ray Serve's lightweight options land in ``service:`` (in place);
the options Ray Serve restarts replicas for land in ``ray_options`` (restart).

Also Ray's environment default for its proxy's request timeout, which both
``serve.start``/``serve.run`` and ``steady deploy`` of a Ray Serve config read."""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from steadyserve.spec.errors import NAME_PATTERN, SpecError

if TYPE_CHECKING:
    from steadyserve.spec import ServiceSpec

SERVICE_FIELDS = {
    "user_config": "user_config",
    "max_ongoing_requests": "max_ongoing_requests",
    "max_queued_requests": "max_queued_requests",
    "graceful_shutdown_wait_loop_s": "graceful_shutdown_wait_loop_s",
    "graceful_shutdown_timeout_s": "graceful_shutdown_timeout_s",
    "health_check_period_s": "health_check_period_s",
    "health_check_timeout_s": "health_check_timeout_s",
}
# Kept in ``ray_options``: a change restarts replicas, as Ray Serve's docs list.
RESTART_KEYS = (
    "ray_actor_options",
    "placement_group_bundles",
    "placement_group_strategy",
    "max_replicas_per_node",
)
NOT_APPLICABLE_KEYS = ("request_router_config",)
DEPLOYMENT_KEYS = (
    "name",
    "logging_config",
    "num_replicas",
    "autoscaling_config",
    *SERVICE_FIELDS,
    *RESTART_KEYS,
    *NOT_APPLICABLE_KEYS,
)
INGRESS_KEY = "ingress"
"""Marks, in ``ray_options``, the service hosting its application's ingress."""
# ``num_replicas: auto``: Ray Serve's autoscaling defaults for it.
AUTO_AUTOSCALING = {"min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2}
# Ray's proxy timeout when http_options.request_timeout_s sets none, first one first
# (ray/serve/_private/constants.py; the second is the older, deprecated name).
REQUEST_TIMEOUT_ENV = (
    "RAY_SERVE_REQUEST_PROCESSING_TIMEOUT_S",
    "SERVE_REQUEST_PROCESSING_TIMEOUT_S",
)


def request_timeout_from_env(environ: Mapping[str, str] = os.environ) -> float | None:
    """Ray's ``RAY_SERVE_REQUEST_PROCESSING_TIMEOUT_S`` (else
    ``SERVE_REQUEST_PROCESSING_TIMEOUT_S``) in seconds; unset or ``0``: None, as
    Ray's ``float(os.environ.get(name, 0)) or ... or None``. A value that is not
    seconds (finite, not negative) is a one-line SpecError (a ValueError) naming it."""
    for name in REQUEST_TIMEOUT_ENV:
        raw = environ.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not math.isfinite(value) or value < 0:
            raise SpecError(name, f"must be a number of seconds, 0 for none, got {raw!r}")
        if value:
            return value
    return None


def hint(key: object, options: tuple[str, ...]) -> str:
    """`` (did you mean X?)`` for a near miss, else nothing."""
    close = difflib.get_close_matches(str(key), options, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def service_name(app: str, deployment: str) -> str:
    """``<app>-<deployment>``, lowercased and made name-safe (``Summarizer`` -> ``summarizer``)."""
    return name_safe(f"{app}-{deployment}")


def name_safe(text: str) -> str:
    """Lowercase, runs of other characters as ``-``, at most 63 characters."""
    raw = re.sub(r"[^a-z0-9_-]+", "-", text.lower())
    return raw.strip("-_")[:63].rstrip("-_")


def overrides(value: object, where: str) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise SpecError(where, "must be a list of deployments")
    found: dict[str, dict[str, Any]] = {}
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise SpecError(f"{where}[{index}]", "must be a mapping")
        for key in item:
            if key not in DEPLOYMENT_KEYS:
                raise SpecError(
                    f"{where}[{index}].{key}", f"unknown field{hint(key, DEPLOYMENT_KEYS)}"
                )
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}[{index}].name", "required (the deployment's name)")
        if name in found:
            raise SpecError(f"{where}[{index}].name", f"duplicate deployment {name!r}")
        found[name] = item
    return found


def service_document(
    app: str,
    dep: str,
    info: Mapping[str, Any],
    override: Mapping[str, Any],
    common: Mapping[str, Any],
    ray_app: Mapping[str, Any],
    notices: list[str],
) -> dict[str, Any]:
    name = service_name(app, dep)
    if not NAME_PATTERN.fullmatch(name):
        raise SpecError(f"deployments[{dep}]", f"makes no valid service name ({name!r})")
    options = {**dict(info.get("options") or {}), **override}
    service: dict[str, Any] = {}
    replicas = options.get("num_replicas")
    autoscaling = options.get("autoscaling_config")
    if replicas == "auto":
        autoscaling = {**AUTO_AUTOSCALING, **(autoscaling or {})}
    elif replicas is not None and autoscaling is None:
        service["replicas"] = replicas
    if autoscaling is not None:
        service["autoscaling_config"] = autoscaling
    for key, target in SERVICE_FIELDS.items():
        if key in options:
            service[target] = options[key]
    doc: dict[str, Any] = {
        "name": name,
        "application": name_safe(app) or "default",
        "import_path": info.get("class_path") or info.get("import_path"),
        "service": service,
        **common,
    }
    ray: dict[str, Any] = {"deployment": dep, "application": dict(ray_app)}
    if info.get("ingress"):  # what serve.get_app_handle resolves (ingress_of)
        ray[INGRESS_KEY] = True
    for key in RESTART_KEYS:
        if options.get(key) is not None:
            ray[key] = options[key]
    actor = options.get("ray_actor_options") or {}
    if isinstance(actor, dict):
        doc["resources"] = _resources(actor)
    if options.get("logging_config") is not None:
        where = f"deployments[{dep}].logging_config"
        enabled = access_log_of(options["logging_config"], where, notices)
        if enabled is not None:
            service["access_log"] = enabled
    for key in NOT_APPLICABLE_KEYS:
        if override.get(key) is not None:
            notices.append(f"{name}: {key}: does not apply here")
    doc["ray_options"] = ray
    return doc


def ingress_of(members: Sequence[ServiceSpec]) -> ServiceSpec | None:
    """The service hosting the ingress of the application ``members`` make up: the
    one marked so; for services made before the mark, the one on the gateway (only
    the ingress has a route prefix), else the first by name."""
    ordered = sorted(members, key=lambda s: s.name or "")
    marked = [s for s in ordered if s.ray_options.get(INGRESS_KEY) is True]
    routed = [s for s in ordered if s.service.route_prefix is not None]
    found = marked or routed or ordered
    return found[0] if found else None


def _resources(actor: Mapping[str, Any]) -> dict[str, Any]:
    """``ray_actor_options`` -> ``resources:`` (what the Ray backend places by)."""
    res: dict[str, Any] = {}
    cpus = actor.get("num_cpus")
    if cpus:
        res["cpus"] = cpus
    gpus = actor.get("num_gpus")
    if gpus:
        res["accelerators"] = {str(actor.get("accelerator_type") or "GPU"): gpus}
    memory = actor.get("memory")
    if isinstance(memory, (int, float)) and not isinstance(memory, bool) and memory > 0:
        res["memory"] = f"{math.ceil(memory / (1 << 20))}MB"
    return res


def as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def access_log_of(value: object, where: str, notices: list[str]) -> bool | None:
    """Ray Serve's ``logging_config``: ``enable_access_log`` becomes the services'
    ``access_log`` (the load balancer's JSON access log, through the endpoint and
    the gateway); its other keys are named once, as not applying here."""
    if not isinstance(value, dict):
        raise SpecError(where, "must be a mapping (Ray Serve's LoggingConfig)")
    enabled = value.get("enable_access_log")
    if enabled is not None and not isinstance(enabled, bool):
        raise SpecError(f"{where}.enable_access_log", "must be true or false")
    others = sorted(str(k) for k in value if k != "enable_access_log")
    if others:
        notices.append(
            f"{where}: {', '.join(others)} do not apply here (replica output goes to"
            " steady logs; enable_access_log sets service.access_log)"
        )
    return enabled
