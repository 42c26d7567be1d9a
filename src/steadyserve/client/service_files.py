"""A service file read as ``steady up``/``update`` and the SDK send it: ``--env``/``--secret``
filled in, a Python replica's ``@deployment`` defaults merged, and the pre-flight checks
run, each mistake one line naming the file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from steadyserve.backends import backend_name
from steadyserve.client.python_defaults import raw_document, with_deployment_defaults
from steadyserve.compat.skyserve import preflight
from steadyserve.spec import SpecError, load_service_file
from steadyserve.spec.variables import cli_values


def load_one(
    file: Path,
    name: str | None,
    notes: list[str] | None = None,
    ignore_resources: bool = False,
    ignore_image: bool = False,
    envs: Sequence[str] = (),
    secrets: Sequence[str] = (),
) -> Any:
    notes = [] if notes is None else notes
    try:
        given_envs = cli_values(envs, "--env", os.environ)
        given_secrets = cli_values(secrets, "--secret", os.environ)
    except SpecError as exc:
        raise exc.in_file(str(file)) from None
    spec = load_service_file(file, name, notes, given_envs, given_secrets)
    spec = with_defaults(spec, raw_document(file), file, "")
    try:
        found = preflight(
            spec,
            ignore_resources=ignore_resources,
            ignore_image=ignore_image,
            backend=backend_name(),
        )
        notes.extend(found)
    except SpecError as exc:
        raise SpecError.combine([exc], file=str(file)) from None
    return spec


def with_defaults(spec: Any, raw: Any, file: Path, prefix: str) -> Any:
    """Fill what a Python replica's @deployment decorator sets and the file does not."""
    try:
        return with_deployment_defaults(spec, raw if isinstance(raw, dict) else {}, file.parent)
    except SpecError as exc:
        raise SpecError(
            f"{prefix}{exc.path}" if exc.path else None, exc.message, file=str(file)
        ) from exc
