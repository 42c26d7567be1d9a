"""The controller's HTTP API: the CLI's commands and the load balancers' long-poll.

Handlers only translate HTTP to controller calls and errors to answers; the
CLI maps 400/404/409 to exit code 2 (bad input, nothing changed).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from aiohttp import web
from aiohttp.typedefs import Middleware

from steadyserve.compat.ray_deployment import ingress_of
from steadyserve.controller import (
    dashboard,
    dashboard_login,
    pool_api,
    progressive,
    service_health,
)
from steadyserve.controller.errors import ApiError, BadInput, NotFound, json_object
from steadyserve.controller.lb_report import take_report
from steadyserve.home import full_disk
from steadyserve.oneline import one_line
from steadyserve.wire import replica_contract as contract
from steadyserve.wire.load_report import LoadReport
from steadyserve.wire.routes import APP_INGRESS_ROUTE, DOCS_PATH_QUERY

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller

log = logging.getLogger("steadyserve.controller")
LONG_POLL_MAX_S = 60.0
# What the routes-only token may do: follow a table, wake a service at zero.
# And resolve an application's ingress service: serve.get_app_handle inside a replica.
_ROUTES_TOKEN_CALLS = frozenset(
    {
        ("GET", "/api/v1/lb/{name}/routes"),
        ("POST", "/api/v1/lb/{name}/wake"),
        ("GET", APP_INGRESS_ROUTE),
    }
)
# What anyone may call: the dashboard's static files (no data) and its login link.
_PUBLIC_CALLS = frozenset(
    {("GET", route) for route in (*dashboard.STATIC_ROUTES, dashboard_login.LOGIN_PATH)}
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


HOME = web.AppKey("home", Path)
"""The home an app serves: what a full disk's answer names."""


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as one line in JSON: a full disk as 507 naming the home and its
    free space (the command changed nothing: its writes are transactions), any other
    fault as 500 with the exception's line (its traceback goes to the log)."""
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response({"error": str(exc), "kind": exc.kind}, status=exc.status)
    except (web.HTTPException, ConnectionError):  # an answer already, or no one to answer
        raise
    except Exception as exc:
        root = request.app.get(HOME) or Path(os.environ.get("STEADY_HOME", "."))
        if full_disk.is_full(exc, root):
            log.warning("%s %s: %s", request.method, request.path, exc)
            line = full_disk.line(root, "the command was not done; free space and run it again")
            return web.json_response({"error": line, "kind": "disk_full"}, status=507)
        log.exception("%s %s failed", request.method, request.path)
        return web.json_response(
            {
                "error": f"internal error: {one_line(exc)} (see {root}/controller.log)",
                "kind": "internal",
            },
            status=500,
        )


def _file(data: dict[str, Any]) -> str | None:
    """The path of the file the spec came from: it is not part of the workdir's code."""
    file = data.get("file")
    return file if isinstance(file, str) else None


def secret_required(
    secret: str, routes_token: str, logins: dashboard_login.Logins, open_metrics: bool
) -> Middleware:
    """Every call must carry ``Authorization: Bearer <secret>`` (STEADY_TOKEN, or by
    default the home's secret: home/api_token.py), except these, each allowed by the
    route it resolved to (never by a prefix of the path it asked for):

    - the dashboard's static files and its login link (no data; the link spends a
      one-time code itself);
    - ``GET /metrics`` when no STEADY_TOKEN is set (read-only: docs/observability.md);
    - ``routes_token``: read route tables and wake a service at zero,
      nothing else; Python replicas get it for their handles;
    - a dashboard session cookie: the page's data calls only."""
    expected = f"Bearer {secret}".encode()
    routes_only = f"Bearer {routes_token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource  # None: no route matched
        call = (request.method, resource.canonical) if resource is not None else None
        given = request.headers.get("Authorization", "").encode()
        if (
            call in _PUBLIC_CALLS
            or (open_metrics and call == ("GET", "/metrics"))
            or hmac.compare_digest(given, expected)
            or (call in _ROUTES_TOKEN_CALLS and hmac.compare_digest(given, routes_only))
            or (
                call in dashboard_login.COOKIE_ROUTES
                and logins.valid(request.cookies.get(logins.cookie_name))
            )
        ):
            return await handler(request)
        return web.json_response(
            {"error": "missing or wrong token (docs/security.md)", "kind": "unauthorized"},
            status=401,
        )

    return check


def build_app(controller: Controller, token: str | None = None) -> web.Application:
    """``token`` is STEADY_TOKEN; without it the API requires the home's secret."""
    root = controller.home.root
    logins = dashboard_login.Logins(contract.home_id(root))
    middlewares: list[Middleware] = [
        secret_required(
            token or contract.api_secret(root), contract.routes_token(root), logins, token is None
        )
    ]
    app = web.Application(
        middlewares=[*middlewares, errors_as_json], client_max_size=8 * 1024 * 1024
    )
    app[HOME] = root
    routes = web.RouteTableDef()
    observer = dashboard.add_routes(app, controller)  # /metrics and the dashboard
    dashboard_login.add_routes(app, logins)  # its one-time links

    @routes.get("/api/v1/health")
    async def health(request: web.Request) -> web.Response:
        return web.json_response(controller.info())

    @routes.get("/api/v1/metrics")
    async def metrics(request: web.Request) -> web.Response:
        """Reconcile tick times and memory: what the controller-scale benchmark reads."""
        services = {}
        for name, runtime in controller.services.items():
            ticks = sorted(runtime.tick_seconds)
            services[name] = {
                "replicas": len(runtime.replicas),
                "ticks": len(ticks),
                "tick_p50_ms": ticks[len(ticks) // 2] * 1000 if ticks else None,
                "tick_max_ms": ticks[-1] * 1000 if ticks else None,
            }
        rss = psutil.Process().memory_info().rss
        return web.json_response({"rss_mb": rss / 2**20, "services": services})

    @routes.post("/api/v1/shutdown")
    async def shutdown(request: web.Request) -> web.Response:
        """``steady controller stop``: the controller exits and frees the gateway port."""
        controller.shutdown(stop_gateway=True)
        return web.json_response({"ok": True})

    @routes.get("/api/v1/services")
    async def list_services(request: web.Request) -> web.Response:
        names = request.query.getall("name", [])
        return web.json_response({"services": controller.status(list(names))})

    @routes.post("/api/v1/services")
    async def create_service(request: web.Request) -> web.Response:
        data = await json_object(request)
        spec_json, spec_yaml = data.get("spec"), data.get("yaml", "")
        if not isinstance(spec_json, str) or not isinstance(spec_yaml, str):
            raise BadInput("'spec' must be the service spec as a JSON string")
        created = await controller.create_service(spec_json, spec_yaml, _file(data))
        return web.json_response(created, status=201)

    @routes.post("/api/v1/services/{name}/update")
    async def update_service(request: web.Request) -> web.Response:
        data = await json_object(request)
        spec_json, spec_yaml = data.get("spec"), data.get("yaml", "")
        mode = data.get("mode")
        if not isinstance(spec_json, str) or not isinstance(spec_yaml, str):
            raise BadInput("'spec' must be the service spec as a JSON string")
        if mode is not None and not isinstance(mode, str):
            raise BadInput("--mode must be rolling, blue_green or canary")
        result = await controller.update_service(
            request.match_info["name"],
            spec_json,
            spec_yaml,
            mode=mode,
            dry_run=bool(data.get("dry_run")),
            spec_file=_file(data),
        )
        return web.json_response(result)

    @routes.post("/api/v1/services/{name}/rollback")
    async def rollback(request: web.Request) -> web.Response:
        data = await json_object(request)
        to = data.get("to")
        if to is not None and (not isinstance(to, int) or isinstance(to, bool)):
            raise BadInput("--to must be a version number")
        result = await controller.rollback(
            request.match_info["name"], to, dry_run=bool(data.get("dry_run"))
        )
        return web.json_response(result)

    @routes.post("/api/v1/deploy")
    async def deploy(request: web.Request) -> web.Response:
        data = await json_object(request)
        items = data.get("services")
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("spec"), str) for i in items
        ):
            raise BadInput("'services' must be a list of {spec, yaml}")
        expect_down = data.get("expect_down")
        if expect_down is not None and not (
            isinstance(expect_down, list) and all(isinstance(n, str) for n in expect_down)
        ):
            raise BadInput("'expect_down' must be a list of service names")
        port, timeout = gateway_options(data.get("gateway"))
        result = await controller.deploy(
            [(i["spec"], str(i.get("yaml", ""))) for i in items],
            bool(data.get("dry_run")),
            _file(data),
            prune_all=bool(data.get("prune_all")),
            expect_down=expect_down,
            gateway_port=port,
            gateway_timeout=timeout,
        )
        return web.json_response(result)

    @routes.get("/api/v1/services/{name}/history")
    async def history(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        running = controller.known(name)
        rows = controller.store.versions(name)
        return web.json_response(
            {
                "down": not running,
                "versions": [
                    {
                        "version": v.version,
                        "created_at": v.created_at,
                        "mode": v.mode,
                        "changes": v.changes,
                        "outcome": v.outcome,
                        "pruned": bool(v.pruned),
                    }
                    for v in rows
                ],
            }
        )

    @routes.get("/api/v1/services/{name}/spec")
    async def spec_text(request: web.Request) -> web.Response:
        """A version's file as it was sent (``steady ray config`` reads a Ray config
        from it); the newest version unless ``?version=N``."""
        name = request.match_info["name"]
        wanted = request.query.get("version", "")
        if wanted and not wanted.isdigit():
            raise BadInput("version must be a whole number")
        number = int(wanted) if wanted else controller.store.latest_version_number(name)
        row = controller.store.version(name, number)
        if row is None:
            raise NotFound(
                f"unknown service: {name}" if not wanted else f"{name}: no version {number}"
            )
        return web.json_response({"name": name, "version": row.version, "yaml": row.spec_yaml})

    @routes.delete("/api/v1/services/{name}")
    async def delete_service(request: web.Request) -> web.Response:
        purge = request.query.get("purge", "") in ("1", "true")
        await controller.delete_service(request.match_info["name"], purge)
        return web.json_response({"deleted": request.match_info["name"]})

    @routes.get("/api/v1/services/{name}/events")
    async def events(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        running = controller.known(name)
        limit = request.query.get("limit", "200")
        if not limit.isdigit() or not 1 <= int(limit) <= 10_000:
            raise BadInput("limit must be a whole number from 1 to 10000")
        rows = controller.store.events(name, limit=int(limit))
        return web.json_response({"down": not running, "events": [row.__dict__ for row in rows]})

    @routes.post("/api/v1/lb/{name}/report")
    async def lb_report(request: web.Request) -> web.Response:
        runtime = controller.runtime(request.match_info["name"])
        data = await json_object(request)
        try:
            report = LoadReport.from_json(data)
        except ValueError as exc:
            raise BadInput(str(exc)) from exc
        take_report(runtime, observer, report, data)
        return web.json_response({"ok": True})

    @routes.get("/api/v1/gateway/routes")
    async def gateway_routes(request: web.Request) -> web.Response:
        """The gateway's route map (prefix -> service), long-polled."""
        try:
            wait = min(float(request.query.get("wait", "25")), LONG_POLL_MAX_S)
        except ValueError as exc:
            raise BadInput("wait must be a number of seconds") from exc
        table = await controller.gateway.routes.wait(request.query.get("known", ""), wait)
        if table is None:
            return web.json_response({"error": "no gateway map yet"}, status=503)
        return web.json_response(table)

    def gateway_options(gateway: Any) -> tuple[int | None, float | None]:
        """A deploy's or ``serve.start``'s ``{port, named, request_timeout_s}`` (null:
        no gateway): the port and timeout to configure."""
        if gateway is not None and not isinstance(gateway, dict):
            raise BadInput("gateway must be an object or null")
        gateway = gateway or {}
        port, timeout = gateway.get("port"), gateway.get("request_timeout_s")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool)):
            raise BadInput("gateway.port must be a port number")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float, type(None))):
            raise BadInput("gateway.request_timeout_s must be a number of seconds")
        if gateway.get("named") is False:
            taken = {r.port for r in controller.store.services()}
            port = controller.gateway.default_port(port, taken)  # its own, or Ray's 8000
        return port, None if timeout is None else float(timeout)

    @routes.post("/api/v1/gateway")
    async def gateway_start(request: web.Request) -> web.Response:
        """``serve.start``: the gateway holds its port from now on, apps or not."""
        port, timeout = gateway_options(await json_object(request))
        problem = controller.gateway.check_port(port)
        if problem is not None:
            raise BadInput(f"gateway: {problem}")
        await controller.gateway.configure(port, timeout)
        return web.json_response(controller.gateway.status())

    @routes.delete("/api/v1/gateway")
    async def gateway_release(request: web.Request) -> web.Response:
        """``serve.shutdown``, ``steady down --all``: free the port unless a service
        is still routed on it."""
        stopped = await controller.gateway.release()
        return web.json_response({"stopped": stopped, **controller.gateway.status()})

    @routes.get("/api/v1/gateway")
    async def gateway_status(request: web.Request) -> web.Response:
        return web.json_response(controller.gateway.status())

    add_route_calls(routes, controller)  # also on the routes-only socket
    progressive.add_routes(routes, controller)  # promote / pause / resume / abort
    pool_api.add_routes(routes, controller)  # pools' jobs: steady jobs launch|queue|cancel
    app.add_routes(routes)
    return app


def add_route_calls(routes: web.RouteTableDef, controller: Controller) -> None:
    """What the routes-only token may call: the API has them, and so has the
    routes-only Unix socket (routes_socket.py) that isolated replicas reach."""

    @routes.get("/api/v1/lb/{name}/routes")
    async def lb_routes(request: web.Request) -> web.Response:
        runtime = controller.runtime(request.match_info["name"])
        try:
            wait = min(float(request.query.get("wait", "25")), LONG_POLL_MAX_S)
        except ValueError as exc:
            raise BadInput("wait must be a number of seconds") from exc
        # Each LB worker polls with its own id (controller/routes.py); another
        # load balancer routing this service too (the gateway) is one more such view.
        known, worker = request.query.get("known", ""), request.query.get("worker", "")
        if consumer := request.query.get("consumer", ""):
            worker = f"consumer:{consumer}"
        table = await runtime.routes.wait(known, wait, worker)
        if runtime.routes.closed:
            raise NotFound(f"unknown service: {request.match_info['name']}")
        if table is None:
            return web.json_response({"error": "no route table yet"}, status=503)
        return web.Response(text=json.dumps(table), content_type="application/json")

    @routes.get(APP_INGRESS_ROUTE)
    async def app_ingress(request: web.Request) -> web.Response:
        """The service hosting application ``app``'s ingress (the routes-only token may
        ask: a replica's ``serve.get_app_handle``); 404 naming it when there is none."""
        app = request.match_info["app"]
        members = [rt.spec for rt in controller.services.values() if rt.spec.application == app]
        spec = ingress_of(members)
        if spec is None or spec.name is None:
            raise NotFound(f"Application '{app}' does not exist.")
        deployment = spec.ray_options.get("deployment")
        found: dict[str, Any] = {
            "application": app,
            "service": spec.name,
            "deployment": deployment if isinstance(deployment, str) else spec.name,
        }
        if request.query.get(DOCS_PATH_QUERY) and spec.name in controller.services:
            found[DOCS_PATH_QUERY] = await service_health.docs_path(controller.services[spec.name])
        return web.json_response(found)

    @routes.post("/api/v1/lb/{name}/wake")
    async def lb_wake(request: web.Request) -> web.Response:
        """The load balancer holds a request at zero replicas: scale up at once."""
        runtime = controller.runtime(request.match_info["name"])
        return web.json_response({"target_replicas": runtime.scale_from_zero()})
