"""A SkyPilot job file for a pool (``sky jobs launch --pool NAME job.yaml``).

A job runs on a worker that already ran its pool's ``setup`` in the pool's
workdir, so SkyPilot's job file for a pool is a ``run`` with its ``name``,
``envs`` and ``resources``; SkyPilot's docs say it may not carry ``setup``,
``workdir`` or ``file_mounts`` (the worker's environment stays the same for
every job). Those are refused here in one line rather than ignored; the
``resources`` a job names are the worker's, said once as a note, except
``resources.job_recovery``, which is honoured (core/jobs.py, ``after_exit``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from steadyserve.core.jobs import DEFAULT_RECOVERY_STRATEGY, RECOVERY_STRATEGIES
from steadyserve.spec.errors import TOP_LEVEL, SpecError

_WORKER_KEYS = ("setup", "workdir", "file_mounts", "pip", "pool", "service")
_ACCEPTED = ("name", "run", "envs", "secrets", "resources", "num_nodes")
_RECOVERY_KEYS = ("strategy", "max_restarts_on_errors", "recover_on_exit_codes")


@dataclass(frozen=True)
class JobFile:
    name: str
    run: str
    envs: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    job_recovery: dict[str, Any] | None = None
    """``strategy``, ``max_restarts_on_errors`` and ``recover_on_exit_codes``, as
    the API takes them."""


def _did_you_mean(key: str, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, options, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def job_recovery(value: Any) -> dict[str, Any] | None:
    """SkyPilot's ``resources.job_recovery``: a strategy's name, or a mapping with
    ``strategy``, ``max_restarts_on_errors`` and ``recover_on_exit_codes``, read
    as SkyPilot's ``StrategyExecutor.make`` reads it: no strategy is its default
    (EAGER_NEXT_REGION), a null ``recover_on_exit_codes`` none, one code a list."""
    if value is None:
        return None
    field_ = "resources.job_recovery"
    if isinstance(value, str):
        value = {"strategy": value}
    if not isinstance(value, dict):
        raise SpecError(field_, "must be a strategy name or a mapping")
    for key in value:
        if key not in _RECOVERY_KEYS:
            raise SpecError(
                f"{field_}.{key}", "unknown field" + _did_you_mean(str(key), _RECOVERY_KEYS)
            )
    strategy = value.get("strategy")
    if strategy is None:
        strategy = DEFAULT_RECOVERY_STRATEGY
    if not isinstance(strategy, str) or strategy.upper() not in RECOVERY_STRATEGIES:
        raise SpecError(f"{field_}.strategy", f"must be one of {', '.join(RECOVERY_STRATEGIES)}")
    restarts = value.get("max_restarts_on_errors", 0)
    if not isinstance(restarts, int) or isinstance(restarts, bool) or restarts < 0:
        raise SpecError(f"{field_}.max_restarts_on_errors", "must be a whole number >= 0")
    codes = value.get("recover_on_exit_codes")
    if codes is None:
        codes = []
    if isinstance(codes, int) and not isinstance(codes, bool):
        codes = [codes]
    if not isinstance(codes, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in codes
    ):
        raise SpecError(f"{field_}.recover_on_exit_codes", "must be exit codes (0 to 255)")
    return {
        "strategy": strategy.upper(),
        "max_restarts_on_errors": restarts,
        "recover_on_exit_codes": codes,
    }


def _text_values(value: Any, key: str, given: dict[str, str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(key, "must map variable names to values")
    out: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(f"{key}.{name}", "must be a variable name")
        if item is None:
            if name not in given:
                raise SpecError(f"{key}.{name}", f"is null: give it with --env {name}=VALUE")
            continue
        if isinstance(item, (dict, list)):
            raise SpecError(f"{key}.{name}", "must be a string, number or boolean")
        out[name] = str(item).lower() if isinstance(item, bool) else str(item)
    return out


def parse_job(data: Any, default_name: str, given: dict[str, str]) -> JobFile:
    """A job of a pool from its file's document; ``given`` are ``--env`` values."""
    if not isinstance(data, dict):
        raise SpecError(TOP_LEVEL, "a job file is a mapping with run:")
    for key in data:
        if key in _WORKER_KEYS:
            raise SpecError(
                str(key),
                "a pool's job runs in its worker's environment (the pool file's setup,"
                " workdir and file_mounts): give it in the pool file (steady jobs pool apply)",
            )
        if key not in _ACCEPTED:
            hint = _did_you_mean(str(key), _ACCEPTED) or f" (one of {', '.join(_ACCEPTED)})"
            raise SpecError(str(key), f"unknown field of a job file{hint}")
    run = data.get("run")
    if not isinstance(run, str) or not run.strip():
        raise SpecError("run", "a job needs a command to run (run: ...)")
    if data.get("num_nodes", 1) != 1:
        raise SpecError("num_nodes", "must be 1 (a job runs on one worker)")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise SpecError("name", "must be a non-empty string")
    envs = _text_values(data.get("envs"), "envs", given)
    envs.update(_text_values(data.get("secrets"), "secrets", given))
    envs.update(given)
    notes: tuple[str, ...] = ()
    resources = data.get("resources")
    if resources is not None and not isinstance(resources, dict):
        raise SpecError("resources", "must be a mapping")
    resources = dict(resources or {})
    recovery = job_recovery(resources.pop("job_recovery", None))
    if resources:
        notes = ("resources: a job runs on one of its pool's workers, with the worker's",)
    return JobFile(name=name.strip(), run=run, envs=envs, notes=notes, job_recovery=recovery)
