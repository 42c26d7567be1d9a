"""Which deployments an application's ``import_path`` binds, asked of a subprocess.

Importing user code in the CLI or the controller is unsafe (it runs whatever the
module does, in our process), so the graph is described by
``python -m steadyserve.serve.graph IMPORT_PATH [--args JSON]`` run in the
application's ``working_dir``; it prints one JSON object per deployment, the
ingress first: ``{name, class_path, options, ingress, init_args, init_kwargs}``
(docs/ray-serve-api.md). An ``import_path`` that is no graph but something a
SteadyServe Python replica serves by itself (a class, an ASGI app, a
``@steadyserve.deployment`` class) is an application of one deployment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from steadyserve.spec.errors import SpecError

DESCRIBE_TIMEOUT_S = 120.0
GRAPH_MODULE = "steadyserve.serve.graph"


def _run(args: list[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", *args],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=DESCRIBE_TIMEOUT_S,
            env=dict(os.environ),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SpecError(
            "import_path", f"importing {args[1]} took over {DESCRIBE_TIMEOUT_S:.0f}s"
        ) from None
    except OSError as exc:
        raise SpecError("import_path", f"cannot run the importer: {exc}") from None


def _last_line(proc: subprocess.CompletedProcess[str], prefix: str) -> str:
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else f"exit code {proc.returncode}").removeprefix(prefix)


def describe_graph(
    import_path: str, workdir: Path, args: Mapping[str, Any]
) -> list[dict[str, Any]] | None:
    """The deployments ``import_path`` binds; None for a single servable class or
    app (or when this installation has no ``steadyserve.serve``)."""
    if not workdir.is_dir():
        return None  # the missing working_dir is reported by the service's workdir
    if not _has_graph_module():
        return None
    command = [GRAPH_MODULE, import_path, *(["--args", json.dumps(dict(args))] if args else [])]
    proc = _run(command, workdir)
    if proc.returncode == 0:
        try:
            found = json.loads(proc.stdout)
        except ValueError:
            raise SpecError("import_path", "the graph describer printed no JSON") from None
        if not isinstance(found, list) or not all(isinstance(i, dict) for i in found):
            raise SpecError("import_path", "the graph describer printed no list of deployments")
        return found
    if not args and _servable_alone(import_path, workdir):
        return None
    raise SpecError("import_path", _last_line(proc, f"{GRAPH_MODULE}: "))


def _has_graph_module() -> bool:
    """Is ``steadyserve.serve.graph`` installed? (Found without importing it.)"""
    package = importlib.util.find_spec("steadyserve.serve")
    folders = package.submodule_search_locations if package is not None else None
    return any((Path(folder) / "graph.py").is_file() for folder in folders or ())


def _servable_alone(import_path: str, workdir: Path) -> bool:
    """Does the Python runner serve ``import_path`` by itself (no graph)?"""
    proc = _run(["steadyserve.replica", "--describe", import_path], workdir)
    return proc.returncode == 0
