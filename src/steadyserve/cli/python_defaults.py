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

import yaml

from steadyserve.spec import ServiceSpec, SpecError, parse_service

DESCRIBE_TIMEOUT_S = 120.0
# Decorator option -> service field it fills when the file leaves it out.
OPTION_FIELDS = {
    "num_replicas": "replicas",
    "user_config": "user_config",
    "max_ongoing_requests": "max_ongoing_requests",
    "health_check_period_s": "health_check_period_s",
    "health_check_timeout_s": "health_check_timeout_s",
    "graceful_shutdown_timeout_s": "graceful_shutdown_timeout_s",
}


def describe(import_path: str, workdir: Path) -> dict[str, Any]:
    """What the runner finds at ``import_path``: its kind and decorator options."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "steadyserve.replica", "--describe", import_path],
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
    options = describe(spec.import_path, workdir).get("options") or {}
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
    """The file's YAML as data (it was already validated by the spec loader)."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))
