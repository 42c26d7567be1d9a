"""Ray Serve config files (``applications:``) -> SteadyServe service documents.

A Ray Serve config (what ``serve deploy`` takes) lists applications, each an
``import_path`` to a bound deployment graph with per-deployment overrides. Each
deployment becomes one SteadyServe service named ``<app>-<deployment>``, so it
gets every update guarantee a service has; the application's ingress deployment
is served under its ``route_prefix`` on the gateway port (``http_options.port``).

This module only translates: it never imports user code. Which deployments an
``import_path`` binds is asked of ``describe`` (a subprocess, see
:func:`default_describe`). Every key Ray accepts is either mapped, stored so that
changing it restarts replicas as Ray does (``ray_options``), or named once in a
notice as not applicable here; none is dropped silently. docs/ray-serve.md has
the whole table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic_core import PydanticCustomError

from steadyserve.compat.ray_deployment import (
    access_log_of,
    as_json,
    hint,
    overrides,
    request_timeout_from_env,
    service_document,
    service_name,
)
from steadyserve.compat.ray_graph import Runtime, describe_graph
from steadyserve.compat.ray_runtime_env import excludes, packages, py_modules, working_dir
from steadyserve.spec.errors import SpecError
from steadyserve.spec.fields import _route_prefix
from steadyserve.spec.fleet import Fleet
from steadyserve.spec.loading import parse_service

RAY_DEFAULT_PORT = 8000

TOP_KEYS = (
    "applications",
    "proxy_location",
    "http_options",
    "grpc_options",
    "logging_config",
    "target_capacity",
)
HTTP_KEYS = ("host", "port", "root_path", "request_timeout_s", "keep_alive_timeout_s")
APP_KEYS = (
    "name",
    "route_prefix",
    "import_path",
    "runtime_env",
    "deployments",
    "args",
    "logging_config",
    "external_scaler_enabled",
)
# Deployment override -> the ``service:`` field it sets (Ray's lightweight list).
Describe = Callable[[str, Path, Mapping[str, Any], Runtime], "list[dict[str, Any]] | None"]
"""``(import_path, workdir, args, runtime)`` -> the deployments it binds, or None
when this installation cannot look inside application graphs."""


def is_ray_config(data: object) -> bool:
    return isinstance(data, dict) and "applications" in data


def translate(
    data: Mapping[str, Any], base_dir: Path, describe: Describe = describe_graph
) -> Fleet:
    """The services a Ray Serve config stands for; SpecError (with every mistake) if bad."""
    out = Fleet(gateway_port=RAY_DEFAULT_PORT, gateway_named=False, scope="applications")
    mistakes: list[SpecError] = []
    for key, value in data.items():
        if key not in TOP_KEYS:
            mistakes.append(SpecError(str(key), f"unknown field{hint(key, TOP_KEYS)}"))
        elif key != "applications" and value is not None:
            _top_level(key, value, out, mistakes)
    apps = data.get("applications")
    if not isinstance(apps, list) or not apps:
        raise SpecError("applications", "must be a non-empty list of applications")
    seen_names: dict[str, int] = {}
    seen_prefixes: dict[str, int] = {}
    for index, app in enumerate(apps):
        where = f"applications[{index}]"
        try:
            _application(app, where, base_dir, describe, out, seen_names, seen_prefixes, index)
        except SpecError as exc:
            mistakes.append(exc)
    if mistakes:
        raise SpecError.combine(mistakes)
    if not out.gateway_timeout:  # Ray's proxy: ``request_timeout_s or`` its env default
        out.gateway_timeout = request_timeout_from_env() or out.gateway_timeout
    return out


def _top_level(key: str, value: Any, out: Fleet, mistakes: list[SpecError]) -> None:
    if key == "http_options":
        if not isinstance(value, dict):
            mistakes.append(SpecError(key, "must be a mapping"))
            return
        for sub, item in value.items():
            if sub == "port":
                if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 65535:
                    mistakes.append(SpecError("http_options.port", "must be a port, 1 to 65535"))
                else:
                    out.gateway_port = item
                    out.gateway_named = True
            elif sub == "request_timeout_s":
                if item is not None and (
                    isinstance(item, bool) or not isinstance(item, (int, float))
                ):
                    mistakes.append(SpecError("http_options.request_timeout_s", "must be seconds"))
                elif item is not None:
                    out.gateway_timeout = float(item)
            elif sub == "host":
                if item not in ("127.0.0.1", "localhost"):
                    out.notices.append(
                        f"http_options.host: {item!r} does not apply here;"
                        " the gateway listens on 127.0.0.1"
                    )
            elif sub in HTTP_KEYS:
                out.notices.append(
                    f"http_options.{sub}: does not apply here (set service.load_balancer"
                    " per service instead)"
                )
            else:
                mistakes.append(
                    SpecError(f"http_options.{sub}", f"unknown field{hint(sub, HTTP_KEYS)}")
                )
        return
    if key == "logging_config":
        try:
            out.access_log = access_log_of(value, key, out.notices)
        except SpecError as exc:
            mistakes.append(exc)
        return
    why = {
        "proxy_location": "one gateway process on this machine serves every application",
        "grpc_options": "the gateway speaks HTTP only",
        "target_capacity": "replica counts come from num_replicas / autoscaling_config",
    }[key]
    out.notices.append(f"{key}: does not apply here ({why})")


def _application(
    app: object,
    where: str,
    base_dir: Path,
    describe: Describe,
    out: Fleet,
    seen_names: dict[str, int],
    seen_prefixes: dict[str, int],
    index: int,
) -> None:
    if not isinstance(app, dict):
        raise SpecError(where, "must be a mapping")
    for key in app:
        if key not in APP_KEYS:
            raise SpecError(f"{where}.{key}", f"unknown field{hint(key, APP_KEYS)}")
    name = app.get("name", "default")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}.name", "must be a non-empty string")
    if name in seen_names:
        raise SpecError(
            f"{where}.name",
            f"duplicate application name {name!r} (also applications[{seen_names[name]}])",
        )
    seen_names[name] = index
    prefix = app.get("route_prefix", "/")
    if prefix is not None:
        try:
            _route_prefix(prefix)
        except PydanticCustomError as exc:
            raise SpecError(f"{where}.route_prefix", exc.message()) from None
        if prefix in seen_prefixes:
            raise SpecError(
                f"{where}.route_prefix",
                f"duplicate route_prefix {prefix!r} (also applications[{seen_prefixes[prefix]}])",
            )
        seen_prefixes[prefix] = index
    import_path = app.get("import_path")
    if not isinstance(import_path, str):
        raise SpecError(f"{where}.import_path", "required (module:attr of the bound application)")
    runtime_env = app.get("runtime_env") or {}
    if not isinstance(runtime_env, dict):
        raise SpecError(f"{where}.runtime_env", "must be a mapping")
    args = app.get("args") or {}
    if not isinstance(args, dict):
        raise SpecError(f"{where}.args", "must be a mapping")
    common, workdir, runtime = _runtime_env(runtime_env, f"{where}.runtime_env", base_dir, out)
    given = overrides(app.get("deployments"), f"{where}.deployments")
    access_log = out.access_log
    if app.get("logging_config") is not None:
        given_log = access_log_of(app["logging_config"], f"{where}.logging_config", out.notices)
        access_log = given_log if given_log is not None else access_log
    if app.get("external_scaler_enabled"):
        out.notices.append(f"{where}.external_scaler_enabled: does not apply here")
    try:
        found = describe(import_path, workdir, args, runtime)
    except SpecError as exc:
        field_name = exc.path if exc.path == "runtime_env" else "import_path"
        raise SpecError(f"{where}.{field_name}", exc.message) from None
    finally:
        out.notices.extend(n for n in runtime.notices if n not in out.notices)
    single = found is None
    if found is None:
        if args:
            raise SpecError(
                f"{where}.args",
                "application builders need steadyserve.serve, which is not installed here",
            )
        attr = import_path.rpartition(":")[2].rpartition(".")[2]
        only = next(iter(given), attr) if len(given) == 1 else attr
        found = [{"name": only, "import_path": import_path, "options": {}, "ingress": True}]
    names = {str(info.get("name")) for info in found}
    for dep in given:
        if dep not in names:
            raise SpecError(
                f"{where}.deployments",
                f"no deployment named {dep!r} in {import_path}"
                + (
                    f" ({import_path} is served as one deployment, {next(iter(names))!r})"
                    if single
                    else f" (it binds: {', '.join(sorted(names))})"
                ),
            )
    ray_app = {"import_path": import_path, "runtime_env": runtime_env, "args": args}
    # Handles find the service of a deployment by name (the runner reads these).
    graph_env = {
        "STEADY_GRAPH_SERVICES": as_json(
            {str(i.get("name")): service_name(name, str(i.get("name"))) for i in found}
        )
    }
    graph_env["STEADY_APP_NAME"] = name  # the replicas' serve.get_replica_context()
    if args:
        graph_env["STEADY_APP_ARGS"] = as_json(args)
    common = {**common, "envs": {**common.get("envs", {}), **graph_env}}
    for info in found:
        dep_name = str(info.get("name"))
        doc = service_document(
            name, dep_name, info, given.get(dep_name, {}), common, ray_app, out.notices
        )
        if info.get("ingress"):
            doc["service"]["route_prefix"] = prefix
        if access_log is not None:  # the deployment's own logging_config wins
            doc["service"].setdefault("access_log", access_log)
        try:
            spec = parse_service(doc, base_dir=base_dir)
        except SpecError as err:
            raise err.under(f"{where}.deployments[{dep_name}]") from None
        out.documents.append(doc)
        out.specs.append(spec)


def _runtime_env(
    env: Mapping[str, Any], where: str, base_dir: Path, out: Fleet
) -> tuple[dict[str, Any], Path, Runtime]:
    """The service fields ``runtime_env`` sets, the folder user code is read from,
    and what the import of the application needs (ray_runtime_env.py).

    Without a ``working_dir`` the code is next to the config file (where ``serve
    deploy`` would have found it on the cluster's path): that folder is the workdir.
    """
    workdir = base_dir.resolve()
    if "working_dir" in env:
        workdir = working_dir(env["working_dir"], f"{where}.working_dir", base_dir)
    fields: dict[str, Any] = {"workdir": str(workdir)}
    runtime = Runtime()
    for key, value in env.items():
        if key == "working_dir":
            continue
        if key == "env_vars":
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise SpecError(f"{where}.env_vars", "must be a mapping of names to strings")
            fields["envs"] = {k: str(v) for k, v in value.items()}
            runtime.envs = dict(fields["envs"])
        elif key in ("pip", "uv"):
            if "pip" in env and "uv" in env:
                raise SpecError(f"{where}.uv", "pip and uv both install packages: give one")
            fields["pip"] = packages(value, f"{where}.{key}", key, workdir, out.notices)
        elif key == "py_modules":
            mounts, wheels = py_modules(value, f"{where}.py_modules", base_dir)
            runtime.py_modules = mounts
            fields["file_mounts"] = dict(mounts)
            if wheels:
                listed = fields.get("pip", [])
                if isinstance(listed, str):
                    raise SpecError(
                        f"{where}.py_modules",
                        "wheels need pip as a list (not a requirements file) to join",
                    )
                fields["pip"] = [*listed, *wheels]
        elif key == "excludes":
            excludes(value, f"{where}.excludes")  # applied when the workdir is copied
        else:
            out.notices.append(
                f"{where}.{key}: does not apply here (replicas run in this machine's"
                " environment); a change still restarts replicas"
            )
    runtime.pip = fields.get("pip")
    return fields, workdir, runtime
