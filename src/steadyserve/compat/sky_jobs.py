"""A SkyPilot job file for a pool (``sky jobs launch --pool NAME job.yaml``).

A job runs on a worker that already ran its pool's ``setup`` in the pool's
workdir, so SkyPilot's job file for a pool is a ``run`` with its ``name``,
``envs`` and ``resources``; SkyPilot's docs say it may not carry ``setup``,
``workdir`` or ``file_mounts`` (the worker's environment stays the same for
every job). Those are refused here in one line rather than ignored; the
``resources`` a job names are the worker's, said once as a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from steadyserve.spec.errors import TOP_LEVEL, SpecError

_WORKER_KEYS = ("setup", "workdir", "file_mounts", "pip", "pool", "service")
_ACCEPTED = ("name", "run", "envs", "secrets", "resources", "num_nodes")


@dataclass(frozen=True)
class JobFile:
    name: str
    run: str
    envs: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


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
            raise SpecError(
                str(key), f"unknown field of a job file (one of {', '.join(_ACCEPTED)})"
            )
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
    if data.get("resources"):
        notes = ("resources: a job runs on one of its pool's workers, with the worker's",)
    return JobFile(name=name.strip(), run=run, envs=envs, notes=notes)
