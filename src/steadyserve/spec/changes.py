"""Classify a spec change field by field (docs/design.md, "Which change does what").

An update compares the running spec with the new one. Fields that running
replicas can take without a restart (counts, load-balancer and probe settings,
``user_config`` where it can be delivered) are *in place*; anything that changes
what a replica process is (its command, code, environment, files, resources) is
*restart*, and so is any field this module does not know: a future field must
not be skipped silently.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from steadyserve.oneline import is_number
from steadyserve.spec.models import ServiceSpec

__all__ = ["ChangeKind", "ChangeSet", "FieldChange", "classify"]

ChangeKind = Literal["in_place", "restart"]


@dataclass(frozen=True)
class FieldChange:
    path: str
    """Dotted field path: ``service.replicas``, ``envs.MODEL``, ``workdir``."""
    old: object
    """JSON-able old value, None when absent (for ``workdir``: the content hash)."""
    new: object
    kind: ChangeKind
    why: str


@dataclass(frozen=True)
class ChangeSet:
    changes: tuple[FieldChange, ...]

    @property
    def empty(self) -> bool:
        return not self.changes

    @property
    def needs_restart(self) -> bool:
        return any(change.kind == "restart" for change in self.changes)

    def describe(self) -> str:
        """One line for history: ``service.replicas 2->3 (in place); run (restart)``."""
        if not self.changes:
            return "no change"
        return "; ".join(_describe_one(change) for change in self.changes)


# Fields of ``service:`` that running replicas take without a restart, and why.
_IN_PLACE_SERVICE_FIELDS: dict[str, str] = {
    "replicas": "replica count changes in place",
    "replica_policy": "autoscaling bounds change in place",
    "max_ongoing_requests": "enforced by the load balancer",
    "max_queued_requests": "enforced by the load balancer",
    "load_balancing_policy": "enforced by the load balancer",
    "load_balancer": "enforced by the load balancer",
    "request_timeout_s": "enforced by the load balancer",
    "cold_start_timeout_s": "enforced by the load balancer",
    "graceful_shutdown_wait_loop_s": "applies to the next drain",
    "graceful_shutdown_timeout_s": "applies to the next drain",
    "health_check_period_s": "applies to the next probe",
    "health_check_timeout_s": "applies to the next probe",
    "readiness_probe": "applies to the next probe",
    "update_mode": "applies to the next update",
    "update_deadline_s": "applies to the next update",
    "history_limit": "applies when the next version is recorded",
    "rolling_update": "applies to the next update",
    "canary": "applies to the next update",
    "blue_green": "applies to the next update",
    "access_log": "applied by the load balancer",
    "websocket_drain_s": "applies to the next drain",
    "route_prefix": "applied by the gateway",
    "served_model_names": "applied by the gateway",
    "pool": "pool size changes in place (the workers are reused)",
}

# Top-level fields that describe a service without changing its replicas.
_IN_PLACE_TOP_FIELDS: dict[str, str] = {
    "application": "which Ray Serve application lists the service",
}

# Fields that are restart changes for a reason worth naming; anything else
# unknown is a restart too, with the generic reason.
_RESTART_WHY: dict[str, str] = {
    "run": "the replica command changed",
    "setup": "the setup command changed",
    "pip": "the version's packages changed (a new environment)",
    "import_path": "the replica code changed",
    "envs": "environment variables are read at start",
    "secrets": "environment variables are read at start",
    "resources": "resources are allocated at start",
    "service.reconfigure_path": "the control path is read at start",
    "service.port": "the endpoint port cannot change in an update",
    "ray_options": "Ray Serve restarts replicas for these options",
}
_UNKNOWN_WHY = "not known to apply in place"

# Top-level mappings reported one key at a time (``envs.MODEL``, ``resources.cpus``).
_PER_KEY = ("envs", "secrets", "resources")
# Never a change: the name identifies the service rather than describing it.
_IGNORED = frozenset({"name"})


def classify(
    old: ServiceSpec,
    new: ServiceSpec,
    *,
    old_workdir_hash: str | None,
    new_workdir_hash: str | None,
) -> ChangeSet:
    """The changes from ``old`` to ``new``, in a stable order (the spec's field order).

    ``workdir`` counts as changed only when its content changed: the hashes are
    the caller's (see :func:`steadyserve.envs.workdir.content_hash`); a hash that is
    unknown (None while a workdir is set) falls back to the path, so an unknown
    content is never taken for an unchanged one.
    """
    old_data = old.model_dump(mode="json")
    new_data = new.model_dump(mode="json")
    changes: list[FieldChange] = []
    for key in _keys(old_data, new_data):
        if key in _IGNORED:
            continue
        before, after = old_data.get(key), new_data.get(key)
        if key == "workdir":
            changes.extend(_workdir(before, after, old_workdir_hash, new_workdir_hash))
        elif key == "service" and isinstance(before, dict) and isinstance(after, dict):
            changes.extend(_service(before, after, new))
        elif key in _PER_KEY and isinstance(before, dict) and isinstance(after, dict):
            for sub in _keys(before, after):
                if not _same(before.get(sub), after.get(sub)):
                    changes.append(
                        FieldChange(
                            f"{key}.{sub}",
                            before.get(sub),
                            after.get(sub),
                            "restart",
                            _RESTART_WHY[key],
                        )
                    )
        elif key in _IN_PLACE_TOP_FIELDS and not _same(before, after):
            changes.append(FieldChange(key, before, after, "in_place", _IN_PLACE_TOP_FIELDS[key]))
        elif not _same(before, after):
            why = _RESTART_WHY.get(key, _UNKNOWN_WHY)
            changes.append(FieldChange(key, before, after, "restart", why))
    return ChangeSet(tuple(changes))


def _service(
    old: Mapping[str, Any], new: Mapping[str, Any], new_spec: ServiceSpec
) -> Iterator[FieldChange]:
    for key in _keys(old, new):
        before, after = old.get(key), new.get(key)
        if _same(before, after):
            continue
        path = f"service.{key}"
        if key == "user_config":
            kind, why = _user_config(new_spec)
        elif key in _IN_PLACE_SERVICE_FIELDS:
            kind, why = "in_place", _IN_PLACE_SERVICE_FIELDS[key]
        else:
            kind, why = "restart", _RESTART_WHY.get(path, _UNKNOWN_WHY)
        yield FieldChange(path, before, after, kind, why)


def _user_config(new_spec: ServiceSpec) -> tuple[ChangeKind, str]:
    """In place when the new version can deliver it to running replicas."""
    if new_spec.import_path is not None:
        return "in_place", "delivered through reconfigure()"
    if new_spec.service.reconfigure_path is not None:
        return "in_place", f"POSTed to {new_spec.service.reconfigure_path}"
    return "restart", "no reconfigure_path: command replicas restart"


def _workdir(
    old_path: object, new_path: object, old_hash: str | None, new_hash: str | None
) -> Iterator[FieldChange]:
    before = None if old_path is None else old_hash or old_path
    after = None if new_path is None else new_hash or new_path
    if before == after:
        return
    if before is None:
        why = "workdir added"
    elif after is None:
        why = "workdir removed"
    else:
        why = "workdir content changed"
    yield FieldChange("workdir", before, after, "restart", why)


def _keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Keys of both, old's order first, then keys only the new one has."""
    return [*old, *(key for key in new if key not in old)]


def _same(a: object, b: object) -> bool:
    """JSON equality: numbers by value (``2`` is ``2.0``), but ``true`` is not ``1``
    and ``"1"`` is not ``1`` as Python's ``==`` would have it for bools."""
    if is_number(a) and is_number(b):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# --------------------------------------------------------------------- describe

_TOKEN = re.compile(r"^[\w./%:+@-]{1,32}$")
# Too long to be useful on one line: named, not shown, in descriptions.
_LONG_PATHS = frozenset({"workdir", "run", "setup"})


SECRET_NAME = re.compile(r"secret|token|passw|key|credential|auth|private|cookie|session", re.I)
"""A name that says its value is secret: ``API_KEY``, ``hf_token``, ``db_password``."""


def may_hold_secret(path: str) -> bool:
    """The one rule for what plans and history never show: ``secrets.*``, and an env
    var or ``user_config`` key whose name says it is secret (``envs.API_KEY``,
    ``user_config.token``) are named, not shown. Everything else is configuration
    and shows in full (``envs.MESSAGE``, ``user_config.message``)."""
    if path.startswith("secrets."):
        return True
    return path.startswith("envs.") and SECRET_NAME.search(path[len("envs.") :]) is not None


def shown(path: str, value: object) -> object:
    """``value`` as plans show it: ``"(set)"`` for a secret, a ``user_config`` with
    its secret-named keys (at any depth) as ``"(set)"``, anything else as it is."""
    if value is None:
        return None
    if may_hold_secret(path):
        return "(set)"
    if path == "service.user_config":
        return _masked(value)
    return value


def _masked(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: "(set)" if SECRET_NAME.search(str(k)) and v is not None else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(item) for item in value]
    return value


def _describe_one(change: FieldChange) -> str:
    label = "in place" if change.kind == "in_place" else "restart"
    plain = change.path not in _LONG_PATHS and not may_hold_secret(change.path)
    plain = plain and change.path != "service.user_config"  # its keys may be secret
    old, new = _short(change.old), _short(change.new)
    if plain and old is not None and new is not None:
        return f"{change.path} {old}->{new} ({label})"
    return f"{change.path} ({label})"


def _short(value: object) -> str | None:
    """A scalar as a short token, or None when it would not read well on one line."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else None
    if isinstance(value, str) and _TOKEN.fullmatch(value):
        return value
    return None
