"""Describe an application graph: ``python -m steadyserve.serve.graph IMPORT_PATH [--args JSON]``.

Run in a subprocess whose cwd is the version's workdir (user code is never
imported by the CLI or the controller themselves). Prints a JSON list, the
ingress first, of ``{name, class_path, service, options, ingress, init_args,
init_kwargs}``; docs/ray-serve-api.md specifies it. A bound deployment among
the constructor arguments is ``{"__steady_handle__": "<deployment name>"}``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from steadyserve.serve import ray_alias
from steadyserve.serve.deployment import Application, Deployment, replace_nodes
from steadyserve.serve.errors import LoadError
from steadyserve.serve.names import attr_name, default_service_name, split_import_path

PROG = "steadyserve.serve.graph"
APP_ARGS = "STEADY_APP_ARGS"
HANDLE_KEY = "__steady_handle__"
REPR_KEY = "__steady_repr__"


class GraphError(Exception):
    """An import path that does not lead to an application; one line for the user."""


def as_application(obj: Any, where: str, args: dict[str, Any] | None = None) -> Application:
    """An application from what an import path names: an application, a deployment
    (bound with no arguments), or a builder function called with ``args``."""
    if isinstance(obj, Application):
        return obj
    if isinstance(obj, Deployment):
        return obj.bind()
    if inspect.isfunction(obj):
        try:
            builder_args = typed_builder_args(obj, args or {})
        except (TypeError, ValueError) as exc:
            raise GraphError(f"the app builder {where}: {exc}") from None
        try:
            built = obj(builder_args)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise GraphError(f"the app builder {where} raised {why}") from None
        if isinstance(built, Application):
            return built
        raise GraphError(
            f"the app builder {where} returned {type(built).__name__}, not an application "
            f"(return SomeDeployment.bind(...))"
        )
    if ray_alias.is_ray_object(obj):
        raise GraphError(ray_alias.ray_object_hint(obj, where))
    raise GraphError(f"{where} is not an application, a deployment or an app builder")


def typed_builder_args(builder: Any, args: dict[str, Any]) -> Any:
    """The builder's one argument: ``args``, or validated into the pydantic model its
    parameter is annotated with (Ray's typed builders), so a bad value fails here."""
    params = list(inspect.signature(builder).parameters.values())
    if len(params) != 1:
        raise TypeError(
            "Application builder functions should take exactly one parameter, "
            "a dictionary containing the passed arguments."
        )
    annotation = params[0].annotation
    if inspect.isclass(annotation):
        import pydantic
        import pydantic.v1

        if issubclass(annotation, pydantic.BaseModel):
            return annotation.model_validate(args)
        if issubclass(annotation, pydantic.v1.BaseModel):
            return annotation.parse_obj(args)
    return args


def call_user_app_builder_with_args_if_necessary(builder: Any, args: dict[str, Any]) -> Any:
    """Ray's contract for what an import path names, with Ray's errors: a built
    application (taking no args) or a builder function returning one."""
    if isinstance(builder, Application):
        if len(args) > 0:
            raise ValueError(
                "Arguments can only be passed to an application builder function, "
                "not an already built application."
            )
        return builder
    if not inspect.isfunction(builder):
        raise TypeError(
            "Expected a built Serve application or an application builder function "
            f"but got: {type(builder)}."
        )
    app = builder(typed_builder_args(builder, args))
    if not isinstance(app, Application):
        raise TypeError(
            "Application builder functions must return an `Application` returned "
            f"from `Deployment.bind()`, but got: {type(app)}."
        )
    return app


def app_args_from_env() -> dict[str, Any]:
    """The builder's args the converter put in the service's environment."""
    raw = os.environ.get(APP_ARGS)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise GraphError(f"{APP_ARGS} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise GraphError(f"{APP_ARGS} must be a JSON object")
    return value


def find_node(app: Application, name: str) -> Application | None:
    """The node whose deployment name is ``name`` (as written in an import path)."""
    for node in app.nodes():
        if node.name == name or attr_name(node.name) == name:
            return node
    return None


def check_unique(app: Application) -> None:
    """Two different nodes with one name would be one service: refuse."""
    seen: dict[str, Application] = {}
    for node in app.nodes():
        other = seen.setdefault(node.name, node)
        if other is not node:
            raise GraphError(
                f"two deployments in the graph are named {node.name!r}; give one .options(name=...)"
            )


def describe_app(app: Application, import_path: str) -> list[dict[str, Any]]:
    check_unique(app)
    out = []
    for node in app.nodes():
        is_root = node is app
        out.append(
            {
                "name": node.name,
                "class_path": import_path if is_root else f"{import_path}.{attr_name(node.name)}",
                "service": default_service_name(node.name),
                "options": jsonable(node.deployment.user_options),
                "ingress": is_root,
                "init_args": jsonable(replace_nodes(list(node.args), _placeholder)),
                "init_kwargs": jsonable(replace_nodes(dict(node.kwargs), _placeholder)),
            }
        )
    return out


def describe(import_path: str, args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Import ``import_path`` (this process must be a throwaway one) and describe it."""

    try:
        module_name, names = split_import_path(import_path)
    except LoadError as exc:
        raise GraphError(str(exc)) from None
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise GraphError(f"cannot import module {module_name!r} ({why})") from None
    for name in names:
        if not hasattr(obj, name):
            raise GraphError(f"{module_name}:{'.'.join(names)}: no attribute {name!r}")
        obj = getattr(obj, name)
    return describe_app(as_application(obj, repr(import_path), args), import_path)


def _placeholder(node: Application) -> dict[str, str]:
    return {HANDLE_KEY: node.name}


def jsonable(value: Any) -> Any:
    """``value`` as JSON data; what JSON cannot hold shown as ``{"__steady_repr__": ...}``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: jsonable(v) for k, v in value.items()}
    return {REPR_KEY: repr(value)[:500]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__)
    parser.add_argument("import_path", help="module:attr of an application or app builder")
    parser.add_argument("--args", default=None, help="JSON object for an app builder")
    ns = parser.parse_args(argv)
    cwd = os.getcwd()
    if not sys.path or sys.path[0] not in ("", cwd):
        sys.path.insert(0, cwd)
    try:
        args = json.loads(ns.args) if ns.args is not None else None
    except ValueError as exc:
        print(f"{PROG}: --args is not valid JSON ({exc})", file=sys.stderr)
        return 2
    if args is not None and not isinstance(args, dict):
        print(f"{PROG}: --args must be a JSON object", file=sys.stderr)
        return 2
    try:
        ray_alias.install()  # `from ray import serve` as written (serve/ray_alias.py)
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the JSON
            described = describe(ns.import_path, args)
    except (GraphError, ray_alias.AliasError) as exc:
        print(f"{PROG}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(json.dumps(described), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
