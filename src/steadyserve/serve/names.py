"""Names: a deployment's default service name, a graph node's import-path name, and
an import path split into its module and attributes.

Pure functions, shared by the graph description (which proposes service names),
the handles (which call them) and the runner's loader (which finds a node).
"""

from __future__ import annotations

import re

from steadyserve.serve.errors import LoadError

_NOT_SERVICE = re.compile(r"[^a-z0-9_-]+")
_NOT_IDENTIFIER = re.compile(r"\W", re.ASCII)


def default_service_name(deployment_name: str) -> str:
    """``Translator`` -> ``translator``, ``My Model`` -> ``my-model``: lowercased,
    runs of characters a service name cannot hold replaced by ``-``, at most 63."""
    name = _NOT_SERVICE.sub("-", deployment_name.lower()).strip("-_")[:63].strip("-_")
    return name or "deployment"


def attr_name(deployment_name: str) -> str:
    """How a node is named in an import path (``module:app.<attr_name>``): every
    character outside ``[A-Za-z0-9_]`` written as ``_``."""
    name = _NOT_IDENTIFIER.sub("_", deployment_name)
    return name if name.isidentifier() else f"_{name}"


def split_import_path(import_path: str) -> tuple[str, list[str]]:
    """``pkg.mod:app.Node`` -> (``pkg.mod``, [``app``, ``Node``]), or a LoadError."""
    module, sep, attr = import_path.partition(":")
    names = attr.split(".")
    valid = (
        sep == ":"
        and all(part.isidentifier() for part in module.split("."))
        and all(name.isidentifier() for name in names)
    )
    if not valid:
        raise LoadError(f"invalid import path {import_path!r} (expected module.sub:attr)")
    return module, names
