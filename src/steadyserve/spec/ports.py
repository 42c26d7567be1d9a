"""Where a command replica listens, read from its spec: ``$PORT`` (the usual case) or
a fixed port it binds itself, and whether it then gets a network namespace of its
own (``service.isolation``). Pure: the controller, the backends and the pre-flight
checks all ask here."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from steadyserve.spec.models import ServiceSpec


_USES_PORT_VAR = re.compile(r"\$\{?PORT\b|\bPORT\b")


def fixed_port(spec: ServiceSpec) -> int | None:
    """The port a command replica binds when it does not use ``$PORT``: SkyServe's
    replica port (``service.ports``, else a single ``resources.ports``), when the
    ``run`` command does not mention PORT. None otherwise."""
    if spec.run is None or _USES_PORT_VAR.search(spec.run):
        return None
    if spec.service.ports is not None:
        return spec.service.ports
    declared = spec.resources.ports
    if isinstance(declared, list):
        declared = declared[0] if len(declared) == 1 else None
    if isinstance(declared, int):
        return declared
    if isinstance(declared, str) and declared.isdigit():
        return int(declared)
    return None


def isolated(spec: ServiceSpec) -> bool:
    """``service.isolation`` resolved: ``auto`` isolates exactly the replicas that
    ignore ``$PORT`` (the files that bind a fixed port), so every other service runs
    as it did before isolation existed."""
    mode = spec.service.isolation
    if mode == "auto":
        return fixed_port(spec) is not None
    return mode == "network"
