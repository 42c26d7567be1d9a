"""A deploy file read into the controller's request: one path for ``steady deploy``
and ``steadyserve.sdk.deploy``, so both check and send exactly the same thing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from steadyserve.backends import backend_name
from steadyserve.client.service_files import with_defaults
from steadyserve.compat.file_mounts import staged
from steadyserve.compat.formats import load_deploy_file
from steadyserve.compat.skyserve import preflight
from steadyserve.spec import SpecError
from steadyserve.spec.fleet import Fleet


@contextlib.contextmanager
def deploy_request(
    file: Path,
    prune_all: bool,
    notes: list[str],
    ignore_resources: bool = False,
    ignore_image: bool = False,
) -> Iterator[tuple[dict[str, Any], Fleet]]:
    """The dry-run request for FILE (every mistake of every service raised at once,
    as one SpecError), with its file_mounts staged while the block runs."""
    plan = load_deploy_file(file)  # a fleet file or a Ray Serve config
    where = "services[{}]." if plan.scope == "all" else "applications: {}: "
    specs = [
        with_defaults(spec, item, file, where.format(i if plan.scope == "all" else spec.name))
        for i, (spec, item) in enumerate(zip(plan.specs, plan.documents, strict=True))
    ]
    mistakes: list[SpecError] = []
    for i, spec in enumerate(specs):
        try:
            notes.extend(
                preflight(
                    spec,
                    ignore_resources=ignore_resources,
                    ignore_image=ignore_image,
                    backend=backend_name(),
                    prefix=where.format(i if plan.scope == "all" else spec.name),
                )
            )
        except SpecError as exc:
            mistakes.append(exc)
    if mistakes:
        raise SpecError.combine(mistakes, file=str(file))
    text = file.read_text(encoding="utf-8")
    with contextlib.ExitStack() as stack:  # file_mounts into the workdir
        sent = [stack.enter_context(staged(s, file)) for s in specs]
        yield (
            {
                "services": [{"spec": s.spec_json(), "yaml": text} for s in sent],
                "dry_run": True,
                "file": str(file.resolve()),
                "prune_all": prune_all,
                "gateway": None
                if plan.gateway_port is None
                else {
                    "port": plan.gateway_port,
                    "named": plan.gateway_named,
                    "request_timeout_s": plan.gateway_timeout,
                },
            },
            plan,
        )
