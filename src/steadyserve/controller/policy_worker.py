"""The subprocess that runs a custom autoscaling policy function (Ray's API).

``python -m steadyserve.controller.policy_worker module:func``, started in the
version's workdir (first on ``sys.path``), reads one JSON context a line on
stdin and answers one JSON line on stdout: ``{"desired": N, "policy_state":
{...}}`` or ``{"error": "..."}``. The user's code runs here, never in the
controller: an exception, a hang or a crash costs this process only.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
import traceback
from typing import Any

from steadyserve.core.autoscale.context import build_context


def _load(import_path: str) -> Any:
    module_name, _, attr = import_path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{import_path} is not callable")
    return target


def _answer(function: Any, fields: dict[str, Any]) -> dict[str, Any]:
    result = function(build_context(fields))
    state: Any = {}
    if isinstance(result, tuple) and len(result) == 2:
        result, state = result
    if isinstance(result, bool) or not isinstance(result, (int, float)):
        raise TypeError(f"returned {type(result).__name__}, not a number of replicas")
    if not math.isfinite(result):
        raise ValueError(f"returned {result}, not a finite number of replicas")
    if state is None:
        state = {}
    if not isinstance(state, dict):
        raise TypeError(f"returned a policy_state of type {type(state).__name__}, not a dict")
    json.dumps(state)  # it must cross back to the controller
    return {"desired": result, "policy_state": state}


def _last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def main() -> None:
    sys.path.insert(0, ".")
    # The policy's own prints go to stderr: stdout carries the answers only.
    out, sys.stdout = sys.stdout, sys.stderr
    import_path = sys.argv[1]
    function: Any = None
    failure: str | None = None
    try:
        function = _load(import_path)
    except BaseException as exc:
        failure = f"cannot import {import_path}: {_last_line(exc)}"
    out.write(json.dumps({"ready": failure is None, "error": failure}) + "\n")
    out.flush()
    for line in sys.stdin:
        if failure is not None:
            reply: dict[str, Any] = {"error": failure}
        else:
            try:
                reply = _answer(function, json.loads(line))
            except Exception as exc:
                reply = {"error": f"{import_path} {_last_line(exc)}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
