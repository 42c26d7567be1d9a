"""Which deployments an application's ``import_path`` binds, asked of a subprocess.

Importing user code in the CLI or the controller is unsafe (it runs whatever the
module does, in our process), so the graph is described by
``python -m steadyserve.serve.graph IMPORT_PATH [--args JSON]`` run in the
application's ``working_dir``; it prints one JSON object per deployment, the
ingress first: ``{name, class_path, options, ingress, init_args, init_kwargs}``
(docs/ray-serve-api.md). An ``import_path`` that is no graph but something a
SteadyServe Python replica serves by itself (a class, an ASGI app, a
``@steadyserve.deployment`` class) is an application of one deployment.

The import runs where the replicas will: in the version's own environment, built
first from ``runtime_env.pip``/``uv`` (the same content key the controller uses,
so it builds nothing again), with ``env_vars`` set and ``py_modules`` importable.
So ``runtime_env: {pip: [fastapi]}`` describes an app that imports FastAPI even
when this machine's SteadyServe has no FastAPI.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadyserve.envs.plan import PipSpec
from steadyserve.spec.errors import SpecError

DESCRIBE_TIMEOUT_S = 120.0
GRAPH_MODULE = "steadyserve.serve.graph"
NOTICE = "notice: "


@dataclass
class Runtime:
    """What an application's ``runtime_env`` gives the import of its code."""

    pip: PipSpec = None
    """The version's packages (``pip`` or ``uv``): the import runs in their environment."""
    envs: dict[str, str] = field(default_factory=dict)
    """``env_vars``: read at import by some modules, so set here as for replicas."""
    py_modules: dict[str, str] = field(default_factory=dict)
    """Importable name -> its local folder."""
    notices: list[str] = field(default_factory=list)
    """Filled with the describer's notices (``from ray import serve`` resolved)."""


@dataclass(frozen=True)
class _Interpreter:
    python: str
    env: dict[str, str]


def _run(
    args: list[str], workdir: Path, where: _Interpreter | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [where.python if where else sys.executable, "-m", *args],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=DESCRIBE_TIMEOUT_S,
            env=where.env if where else dict(os.environ),
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
    import_path: str,
    workdir: Path,
    args: Mapping[str, Any],
    runtime: Runtime | None = None,
) -> list[dict[str, Any]] | None:
    """The deployments ``import_path`` binds; None for a single servable class or
    app (or when this installation has no ``steadyserve.serve``)."""
    if not workdir.is_dir():
        return None  # the missing working_dir is reported by the service's workdir
    if not _has_graph_module():
        return None
    runtime = runtime or Runtime()
    command = [GRAPH_MODULE, import_path, *(["--args", json.dumps(dict(args))] if args else [])]
    with _interpreter(workdir, runtime) as where:
        proc = _run(command, workdir, where)
        _collect_notices(proc.stderr, runtime.notices)
        if proc.returncode == 0:
            try:
                found = json.loads(proc.stdout)
            except ValueError:
                raise SpecError("import_path", "the graph describer printed no JSON") from None
            if not isinstance(found, list) or not all(isinstance(i, dict) for i in found):
                raise SpecError("import_path", "the graph describer printed no list of deployments")
            return found
        if not args and _servable_alone(import_path, workdir, where):
            return None
    raise SpecError("import_path", _last_line(proc, f"{GRAPH_MODULE}: "))


def _collect_notices(stderr: str, notices: list[str]) -> None:
    for line in stderr.splitlines():
        text = line.strip().removeprefix(NOTICE)
        if line.strip().startswith(NOTICE) and text not in notices:
            notices.append(text)


@contextmanager
def _interpreter(workdir: Path, runtime: Runtime) -> Iterator[_Interpreter]:
    """The interpreter and environment the import runs with: the version's own
    environment when ``runtime_env`` installs packages (built now if need be)."""
    env = {**os.environ, **runtime.envs}
    python = sys.executable
    if runtime.pip:
        from steadyserve.envs import build as environment_build
        from steadyserve.home.paths import Home

        started = time.monotonic()
        try:
            environment, built = asyncio.run(
                environment_build.ensure(Home.from_env(), workdir, None, runtime.pip, env)
            )
        except environment_build.BuildError as exc:
            raise SpecError("runtime_env", f"the version's environment: {exc}") from None
        if built:
            runtime.notices.append(
                f"runtime_env: built the version's environment {environment.key[:16]}"
                f" in {time.monotonic() - started:.1f}s (replicas start in it)"
            )
        python, env = environment.python, environment.activate(env)
    with tempfile.TemporaryDirectory(prefix="steady-py-modules-") as folder:
        if runtime.py_modules:
            for name, source in runtime.py_modules.items():
                os.symlink(source, Path(folder) / name)
            path = [folder, *filter(None, [env.get("PYTHONPATH")])]
            env["PYTHONPATH"] = os.pathsep.join(path)
        yield _Interpreter(python, env)


def _has_graph_module() -> bool:
    """Is ``steadyserve.serve.graph`` installed? (Found without importing it.)"""
    package = importlib.util.find_spec("steadyserve.serve")
    folders = package.submodule_search_locations if package is not None else None
    return any((Path(folder) / "graph.py").is_file() for folder in folders or ())


def _servable_alone(import_path: str, workdir: Path, where: _Interpreter) -> bool:
    """Does the Python runner serve ``import_path`` by itself (no graph)?"""
    proc = _run(["steadyserve.replica", "--describe", import_path], workdir, where)
    return proc.returncode == 0
