"""Merge a ``@steadyserve.deployment(...)`` decorator's defaults into a spec.

As in Ray Serve, the decorator carries defaults and the service file overrides
them. Only the user's code knows the decorator, so the CLI asks the runner to
import it (``python -m steadyserve.replica --describe``) in the workdir; a
module that cannot be imported is bad input, reported before anything changes.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from steadyserve.envs import build as environment_build
from steadyserve.envs.plan import needs_environment
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec, SpecError, parse_service
from steadyserve.spec.loading import read_document

DESCRIBE_TIMEOUT_S = 120.0
# Decorator option -> service field it fills when the file leaves it out.
OPTION_FIELDS = {
    "num_replicas": "replicas",
    "user_config": "user_config",
    "max_ongoing_requests": "max_ongoing_requests",
    "max_queued_requests": "max_queued_requests",  # Ray's option, same field
    "graceful_shutdown_wait_loop_s": "graceful_shutdown_wait_loop_s",
    "health_check_period_s": "health_check_period_s",
    "health_check_timeout_s": "health_check_timeout_s",
    "graceful_shutdown_timeout_s": "graceful_shutdown_timeout_s",
}


def describe(import_path: str, workdir: Path, python: str | None = None) -> dict[str, Any]:
    """What the runner finds at ``import_path``: its kind and decorator options."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-m", "steadyserve.replica", "--describe", import_path],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=DESCRIBE_TIMEOUT_S,
            env=dict(os.environ),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise SpecError(
            "import_path", f"importing {import_path} took over {DESCRIBE_TIMEOUT_S:.0f}s"
        ) from exc
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise SpecError("import_path", why.removeprefix("steadyserve.replica: "))
    data = json.loads(proc.stdout)
    return data if isinstance(data, dict) else {}


def with_deployment_defaults(spec: ServiceSpec, raw: dict[str, Any], base_dir: Path) -> ServiceSpec:
    """The spec with decorator defaults for every field the file did not set."""
    if spec.import_path is None:
        return spec
    workdir = Path(spec.workdir) if spec.workdir else base_dir
    try:
        options = describe(spec.import_path, workdir, _environment_python(spec, workdir))
    except SpecError as exc:
        if not _needs_its_environment(spec, exc):
            raise
        click.echo(
            f"warning: import_path: {spec.import_path} imports packages its setup/pip installs"
            f" ({exc.message}); its @deployment options are not read before its environment"
            " is built: set them in the service file",
            err=True,
        )
        return spec
    options = options.get("options") or {}
    service = dict(raw.get("service") or {})
    merged = copy.deepcopy(raw)
    changed = False
    for option, field in OPTION_FIELDS.items():
        if option not in options or options[option] is None or field in service:
            continue
        if field == "replicas" and ("replica_policy" in service or "autoscaling_config" in service):
            continue
        service[field] = options[option]
        changed = True
    if not changed:
        return spec
    merged["service"] = service
    return parse_service(merged, base_dir=base_dir, name=spec.name)


def raw_document(path: Path) -> Any:
    """The file's YAML as data, read by the spec loader's own reader (its size,
    duplicate-key and alias checks hold here too)."""
    return read_document(path)


# A module whose packages come from the version's own
# environment is described with that environment's interpreter when it was
# already built (same setup, pip: and dependency files), and otherwise cannot be
# imported here yet: a one-line warning instead of an error.
def _environment_python(spec: ServiceSpec, workdir: Path) -> str | None:
    if not needs_environment(spec.setup, spec.pip):
        return None
    try:
        key = environment_build.key_for(workdir, spec.setup, spec.pip)
    except environment_build.BuildError:
        return None
    found = environment_build.existing(Home.from_env(), key)
    return found.python if found is not None else None


def _needs_its_environment(spec: ServiceSpec, exc: SpecError) -> bool:
    return needs_environment(spec.setup, spec.pip) and "No module named" in exc.message
