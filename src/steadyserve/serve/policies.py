"""Custom autoscaling policies given as functions, shipped with the application.

Ray takes ``policy_function`` as a callable as well as an import path. A policy
runs in a subprocess started in the service's workdir (controller/policy_runner.py),
which imports it by path; so ``serve.run`` pickles the callables into that
folder, beside the application, with a small module that unpickles them, and
names each as ``steady_policies:<Deployment>``. As for the application itself,
a function of an importable module is pickled by reference and imported from
the driver's import path, which the module puts first on ``sys.path``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from steadyserve.serve.deployment import Application
from steadyserve.serve.names import attr_name

MODULE = "steady_policies"
PICKLE_FILE = "policies.pkl"

_SOURCE = '''"""Written by serve.run: this application's autoscaling policies given as functions."""
import pathlib
import sys

import cloudpickle

sys.path[:0] = [p for p in {paths} if p not in sys.path]
globals().update(cloudpickle.loads(pathlib.Path(__file__).with_name({pickle!r}).read_bytes()))
'''


def callable_policy(options: dict[str, Any]) -> Any:
    """The ``autoscaling_config.policy.policy_function`` of ``options`` when it is a
    function (not an import path); None otherwise."""
    scaling = options.get("autoscaling_config")
    policy = scaling.get("policy") if isinstance(scaling, dict) else None
    function = policy.get("policy_function") if isinstance(policy, dict) else None
    return None if function is None or isinstance(function, str) else function


def ship(nodes: Iterable[Application], folder: Path, code_paths: Sequence[str]) -> dict[str, str]:
    """Write the callable policies of ``nodes`` into ``folder``; deployment name ->
    the import path that names its policy there. Leaves no file when there is none."""
    functions = {
        attr_name(node.name): fn
        for node in nodes
        if (fn := callable_policy(node.deployment.user_options)) is not None
    }
    module, pickled = folder / f"{MODULE}.py", folder / PICKLE_FILE
    if not functions:
        module.unlink(missing_ok=True)
        pickled.unlink(missing_ok=True)
        return {}
    import cloudpickle  # type: ignore[import-untyped]

    source = _SOURCE.format(paths=json.dumps(list(code_paths)), pickle=PICKLE_FILE)
    for path, content in ((pickled, cloudpickle.dumps(functions)), (module, source.encode())):
        draft = path.with_name(f".{path.name}.{os.getpid()}")
        draft.write_bytes(content)
        os.chmod(draft, 0o600)
        os.replace(draft, path)
    return {
        node.name: f"{MODULE}:{attr_name(node.name)}"
        for node in nodes
        if attr_name(node.name) in functions
    }


def with_policy_path(options: dict[str, Any], path: str) -> dict[str, Any]:
    """``options`` with its callable policy replaced by ``path``."""
    scaling = dict(options["autoscaling_config"])
    scaling["policy"] = {**scaling["policy"], "policy_function": path}
    return {**options, "autoscaling_config": scaling}
