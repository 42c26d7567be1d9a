"""``serve.run``, ``start``, ``shutdown``, ``delete``, ``get_app_handle``: Ray Serve's
driver API on the controller of ``STEADY_HOME``.

``serve.run(app)`` is ``steady deploy`` of one Ray Serve application: the graph
is shipped by value (``shipped``), each deployment becomes the service
``<app>-<deployment>`` (the same documents a ``serve_config.yaml`` makes, so
``steady status`` shows them and a config-made app is reachable from here), the
ingress is routed on the gateway under ``route_prefix``, and ``run`` returns
once every service is ready on the new version. The services of one
application are owned by it: running it again updates them in place (rolling)
and takes down deployments it no longer binds; other applications are kept.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from steadyserve.client.connection import Client, CommandError
from steadyserve.compat import ray_deployment
from steadyserve.compat.ray_deployment import as_json, name_safe, service_document, service_name
from steadyserve.controller.errors import PREFIX_TAKEN
from steadyserve.core.states import LIVE_REPLICA_STATES, ReplicaStatus
from steadyserve.home.paths import Home
from steadyserve.serve import app_ingress, policies, shipped
from steadyserve.serve import graph as serve_graph
from steadyserve.serve import handle as handles
from steadyserve.serve.deployment import Application, Deployment
from steadyserve.serve.exceptions import RayServeException
from steadyserve.serve.ingress import ingress_of
from steadyserve.serve.names import attr_name
from steadyserve.serve.overview import failure_reason
from steadyserve.spec.errors import SpecError
from steadyserve.spec.loading import parse_service
from steadyserve.wire import replica_contract as contract

HTTP_PORT_ENV = "STEADY_SERVE_HTTP_PORT"
DEFAULT_HTTP_PORT = 8000  # Ray's http_options.port
RUN_TIMEOUT_ENV = "STEADY_SERVE_RUN_TIMEOUT_S"
DEFAULT_RUN_TIMEOUT_S = 120.0
POLL_S = 0.1
OWNER_PREFIX = "serve.run:"

_http_port: int | None = None
_request_timeout_s: float | None = None


def home() -> Home:
    return Home.from_env().ensure()


def client() -> Client:
    """The home's controller (started as ``steady up`` starts it); this process's
    handles follow its route tables from now on."""
    where = home()
    handles.connect_driver(
        where, contract.routes_token(where.root), contract.graph_secret(where.root)
    )
    return Client(where)


def http_port() -> int:
    if _http_port is not None:
        return _http_port
    raw = os.environ.get(HTTP_PORT_ENV)
    if raw is None:
        return DEFAULT_HTTP_PORT
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ValueError(f"{HTTP_PORT_ENV} must be a port, 1 to 65535, got {raw!r}")
    return port


def port_source(started: int | None = None) -> str:
    """Who chose the gateway port (``started``: serve.start's now), for a message."""
    chosen = started if started is not None else _http_port
    if chosen is not None:
        return f'serve.start(http_options={{"port": {chosen}}})\'s'
    if os.environ.get(HTTP_PORT_ENV) is not None:
        return f"{HTTP_PORT_ENV}={os.environ[HTTP_PORT_ENV]}"
    return (
        f"Ray's default, {DEFAULT_HTTP_PORT} (choose another with serve.start(http_options="
        f'{{"port": N}}) or {HTTP_PORT_ENV})'
    )


def start(http_options: Any = None, **_ignored: Any) -> None:
    """Start the controller and the gateway on its port (held until ``shutdown``),
    as Ray's ``serve.start`` starts its proxy; ``http_options`` (a dict or an object)
    may set ``port`` (for later ``serve.run`` calls too) and ``request_timeout_s``
    (the gateway answers Ray's 408 past it)."""
    global _http_port, _request_timeout_s
    port = _option(http_options, "port")
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
    ):
        raise ValueError(f"http_options.port must be a port, 1 to 65535, got {port!r}")
    timeout = _option(http_options, "request_timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
        raise ValueError(f"http_options.request_timeout_s must be seconds, got {timeout!r}")
    options = gateway_options(port, None if timeout is None else float(timeout))
    try:
        _call(client(), "POST", "/api/v1/gateway", options)
    except RuntimeError as exc:
        if str(exc).startswith("gateway: "):
            raise RuntimeError(f"{exc}; the port is {port_source(port)}") from None
        raise
    # Kept once the gateway took them: later serve.run calls ask for the same.
    _http_port = port if port is not None else _http_port
    _request_timeout_s = options["request_timeout_s"]


def gateway_options(port: int | None = None, timeout: float | None = None) -> dict[str, Any]:
    """The gateway this driver asks for: a port it names (``port``, serve.start's, or
    STEADY_SERVE_HTTP_PORT) moves the gateway there; with none named, the home's
    gateway keeps its port (Ray's 8000 if it has none), so a second driver takes
    over the first one's applications where they are. The timeout is
    ``http_options.request_timeout_s`` (``timeout``, else serve.start's), else
    Ray's RAY_SERVE_REQUEST_PROCESSING_TIMEOUT_S; None keeps the gateway's."""
    named = port is not None or _http_port is not None or HTTP_PORT_ENV in os.environ
    timeout = timeout if timeout is not None else _request_timeout_s
    from_env = ray_deployment.request_timeout_from_env()  # Ray's ``request_timeout_s or``
    return {
        "port": port if port is not None else http_port(),
        "named": named,
        "request_timeout_s": timeout if timeout or from_env is None else from_env,
    }


def _option(options: Any, name: str) -> Any:
    if options is None:
        return None
    if isinstance(options, dict):
        return options.get(name)
    return getattr(options, name, None)


def as_app(target: Any) -> Application:
    if isinstance(target, Application):
        return target
    if isinstance(target, Deployment):
        return target.bind()
    raise TypeError(f"serve.run takes an application (Deployment.bind()), not {target!r}")


CODE_VERSION_KEY = "code_version"
"""In ``ray_options``: the deployment's code version, Ray's ``version`` or one per run."""


def documents(app: Application, name: str, route_prefix: str | None) -> list[dict[str, Any]]:
    """One service document per deployment of ``app``, its graph shipped in a folder
    of the home (the services' workdir)."""
    serve_graph.name_uniquely(app)
    nodes = list(app.nodes())
    names = [n.name for n in nodes]
    ingresses = [
        n
        for n in nodes
        if isinstance(n.deployment.func_or_class, type)
        and ingress_of(n.deployment.func_or_class) is not None
    ]
    if len(ingresses) > 1:  # Ray's build_app refuses it so (Ray 2.60)
        raise RayServeException(
            f'Found multiple FastAPI deployments in application "{name}". '
            "Please only include one deployment with @serve.ingress "
            "in your application to avoid this issue."
        )
    folder = home().root / "serve_run" / (name_safe(name) or "default")
    shipped.write(app, folder, {"application": name, "ingress": app.name})
    code_paths = _code_paths()
    policy_paths = policies.ship(nodes, folder, code_paths)
    envs = {
        "STEADY_GRAPH_SERVICES": as_json({n: service_name(name, n) for n in names}),
        contract.APP_NAME: name,
        "PYTHONPATH": os.pathsep.join(code_paths),
    }
    common = {"workdir": str(folder), "envs": envs}
    ray_app = {"import_path": "serve.run", "runtime_env": {}, "args": {}}
    notices: list[str] = []
    out = []
    # Ray gives every serve.run a new code version unless the deployment names its
    # own (``version=``): re-running an unchanged script replaces the replicas
    # (Ray's test_deploy_basic). A change of it restarts, as a ray_options change.
    run_version = secrets.token_hex(8)
    for node in nodes:
        options = {k: v for k, v in node.deployment.user_options.items() if k != "name"}
        if node.name in policy_paths:
            options = policies.with_policy_path(options, policy_paths[node.name])
        info = {
            "name": node.name,
            "class_path": f"{shipped.MODULE}:{shipped.APP_ATTR}.{attr_name(node.name)}",
            "options": serve_graph.jsonable(options),
            "ingress": node is app,
        }
        doc = service_document(name, node.name, info, {}, common, ray_app, notices)
        declared = node.deployment.user_options.get("version")
        doc["ray_options"][CODE_VERSION_KEY] = run_version if declared is None else str(declared)
        if node is app:
            doc["service"]["route_prefix"] = route_prefix
        out.append(doc)
    return out


def _code_paths() -> list[str]:
    """The driver's import path (its own modules, a test's package), less the
    interpreter's own folders: classes pickled by reference import from there."""
    skip = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths = [os.getcwd()]
    for entry in sys.path:
        path = os.path.abspath(entry or os.getcwd())
        if path in paths or not os.path.isdir(path):
            continue
        if any(path == s or path.startswith(s + os.sep) for s in skip):
            continue
        paths.append(path)
    return paths


def run(
    target: Any,
    blocking: bool = False,
    name: str = "default",
    route_prefix: str | None = "/",
    logging_config: Any = None,
    _local_testing_mode: bool = False,
    _wait: bool = True,
    **_ignored: Any,
) -> handles.DeploymentHandle:
    """Deploy ``target`` as application ``name``; wait until it runs; its ingress handle."""
    if not isinstance(name, str) or not name:
        raise ValueError("serve.run(name=...): must be a non-empty string")
    if route_prefix is not None and (
        not isinstance(route_prefix, str) or not route_prefix.startswith("/")
    ):
        raise ValueError(
            f"Invalid route_prefix '{route_prefix}', must start with a forward slash ('/')"
        )
    app = as_app(target)
    c = client()
    docs = documents(app, name, route_prefix)
    specs = []
    for doc in docs:
        try:
            specs.append(parse_service(doc, base_dir=Path(doc["workdir"])))
        except SpecError as exc:
            raise ValueError(f"application {name!r}: {exc}") from None
    request: dict[str, Any] = {
        "services": [{"spec": s.spec_json(), "yaml": ""} for s in specs],
        "dry_run": True,
        "file": OWNER_PREFIX + name,
        "gateway": gateway_options(),
    }
    try:
        preview = _call(c, "POST", "/api/v1/deploy", request)
    except RuntimeError as exc:
        if str(exc).startswith(PREFIX_TAKEN):  # as Ray's controller refuses it
            raise RayServeException(f"Failed to deploy application {name!r}: {exc}") from None
        if str(exc).startswith("gateway: "):
            raise RuntimeError(f"{exc}; the port is {port_source()}") from None
        raise
    removals = [i["name"] for i in preview["services"] if i["action"] == "down"]
    request = {**request, "dry_run": False, "expect_down": removals}
    _call(c, "POST", "/api/v1/deploy", request)
    if _wait:
        wait_running(c, name, [str(s.name) for s in specs])
        wait_gateway(c, [str(s.name) for s in specs])
    ingress = handles.DeploymentHandle(app.name, name, service=service_name(name, app.name))
    if blocking:
        _block()
    return ingress


def _block() -> None:
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        return


def _call(c: Client, method: str, path: str, body: Any = None) -> Any:
    try:
        return c.call(method, path, body, timeout=600.0)
    except CommandError as exc:
        raise RuntimeError(str(exc)) from None


_HOLDING = frozenset(str(s) for s in (*LIVE_REPLICA_STATES, ReplicaStatus.SHUTTING_DOWN))
"""Replica statuses with a process (or one about to be): not yet gone."""


def _ready(svc: dict[str, Any]) -> bool:
    replicas = svc.get("replicas") or []
    current = [r for r in replicas if r.get("version") == svc.get("version")]
    ready = [r for r in current if r.get("status") == "READY"]
    update = svc.get("update") or {}
    # As Ray's deployment is HEALTHY only once no replica of an older version is
    # still stopping: a replaced replica's __del__ has run when serve.run returns.
    stopping = [r for r in replicas if r not in current and r.get("status") in _HOLDING]
    return (
        svc.get("status") == "READY"
        and update.get("status") in (None, "SUCCEEDED")
        and len(ready) >= int(svc.get("target_replicas") or 0)
        and svc.get("active_versions") == [svc.get("version")]
        and not stopping
    )


def wait_running(c: Client, app: str, names: list[str]) -> None:
    """Until every service is ready on its newest version; RuntimeError on failure."""
    try:
        timeout = float(os.environ.get(RUN_TIMEOUT_ENV, DEFAULT_RUN_TIMEOUT_S))
    except ValueError:
        timeout = DEFAULT_RUN_TIMEOUT_S
    deadline = time.monotonic() + timeout
    query = "&".join(f"name={n}" for n in names)
    while True:
        services = _call(c, "GET", f"/api/v1/services?{query}")["services"]
        failed = [s for s in services if s.get("status") in ("FAILED", "FAILED_CLEANUP")]
        bad_update = [
            s
            for s in services
            if (s.get("update") or {}).get("status")
            in (
                "FAILED",
                "ROLLED_BACK",
            )
        ]
        if failed or bad_update:
            svc = (failed or bad_update)[0]
            reason = failure_reason(svc)
            raise RuntimeError(
                f"Deploying application {app!r} failed: deployment {svc.get('deployment')!r}"
                f" (service {svc['name']}) is {svc.get('status')}"
                + (f": {reason}" if reason else "")
                + f"; see `steady logs {svc['name']}`"
            )
        if all(_ready(s) for s in services):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"application {app!r} was not running within {timeout:g}s ({RUN_TIMEOUT_ENV})"
            )
        time.sleep(POLL_S)


def wait_gateway(c: Client, names: Collection[str] = (), timeout: float = 10.0) -> None:
    """Until the gateway holds the controller's newest route map and the replica
    tables of the services ``names`` (the application just run), so a request sent
    right after ``serve.run`` (or ``delete``) meets the routes it made: not an old
    prefix, not a new lane with no replicas yet. Other applications' lanes are not
    waited for. Bounded: a gateway that is down or slow only delays the return."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gateway = _call(c, "GET", "/api/v1/gateway")
        if not gateway.get("running"):
            return
        applied = int(gateway.get("applied_version") or 0)
        behind = set(gateway.get("lanes_behind") or ()) & set(names)
        if applied >= int(gateway.get("routes_version") or 0) and not behind:
            return
        time.sleep(POLL_S / 4)


def services(c: Client) -> list[dict[str, Any]]:
    return list(_call(c, "GET", "/api/v1/services")["services"])


def delete(name: str, _blocking: bool = True) -> None:
    """Take down every service of application ``name`` (nothing if there is none)."""
    c = client()
    app = name_safe(name) or "default"
    for svc in services(c):
        if svc.get("application") == app:
            _call(c, "DELETE", f"/api/v1/services/{svc['name']}")
    if _blocking:
        wait_gateway(c)


def shutdown() -> None:
    """Take down every application (services with an application; services made with
    ``steady up`` are kept), stop the gateway (unless such a service is routed on it)
    and forget this process's handles' routes."""
    where = Home.from_env()
    if where.read_controller_info() is None:
        return
    global _http_port, _request_timeout_s
    c = client()
    for svc in services(c):
        if svc.get("application"):
            _call(c, "DELETE", f"/api/v1/services/{svc['name']}")
    _call(c, "DELETE", "/api/v1/gateway")  # the port is free when this returns
    _http_port = _request_timeout_s = None  # as Ray's next serve.start starts afresh
    handles.forget_routers()


def get_app_handle(name: str) -> handles.DeploymentHandle:
    """The ingress handle of running application ``name``: in a driver or inside a
    replica, which asks with its routes-only token (it never holds the API's)."""
    app = name_safe(name) or "default"
    found = app_ingress.lookup(app)
    if found is None:
        raise RayServeException(f"Application '{name}' does not exist.")
    return handles.DeploymentHandle(str(found["deployment"]), name, service=str(found["service"]))


def get_deployment_handle(deployment_name: str, app_name: str | None = None) -> Any:
    """Inside a replica: the handle its graph would bind. In a driver: the handle to
    that deployment of a running application."""
    if os.environ.get(contract.CONTROLLER_FILE) or os.environ.get(handles.GRAPH_ROUTES):
        return handles.DeploymentHandle(deployment_name, app_name or "default")
    app = app_name or "default"
    client()
    return handles.DeploymentHandle(
        deployment_name, app, service=service_name(app, deployment_name)
    )
