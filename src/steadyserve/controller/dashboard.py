"""The dashboard and ``/metrics``: routes added to the controller's API.

The page is static (``steadyserve/dashboard/static``: HTML, a small script and a
vendored uPlot), so there is no build step and nothing is fetched from the
internet. It polls two JSON endpoints: ``/api/v1/dashboard`` (services,
replicas, the update in progress with its plan and events) and
``/api/v1/dashboard/timeseries`` (per-version rates and latencies).

Access: the static files hold no data and are served to anyone
(``STATIC_ROUTES``); the JSON needs the API's secret or the session cookie a
one-time link opens (controller/dashboard_login.py), which the page's fetches
send by themselves.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from steadyserve.controller.metrics import ControllerCollector, Observer
from steadyserve.controller.status import REGION, service_json
from steadyserve.core.states import ReplicaStatus, UpdateStatus
from steadyserve.core.strategies import strategy_of
from steadyserve.wire.counts import CONTENT_TYPE
from steadyserve.wire.exposition import render

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller
    from steadyserve.controller.runtime import ServiceRuntime

STATIC_ROUTES = ("/dashboard", "/dashboard/", "/dashboard/static/{name}")
"""The page's files: no data in them, so no secret is needed."""
OBSERVER_KEY = web.AppKey("observer", Observer)
EVENTS_SHOWN = 40
STATIC_TYPES = {
    ".html": "text/html",
    ".js": "application/javascript",
    ".css": "text/css",
    ".txt": "text/plain",
}


def _static(name: str) -> bytes | None:
    if "/" in name or name.startswith("."):
        return None
    node = resources.files("steadyserve.dashboard").joinpath("static").joinpath(name)
    return node.read_bytes() if node.is_file() else None


def plan_lines(runtime: ServiceRuntime) -> list[str]:
    """The update's plan in words, from its mode and the spec's limits."""
    update = runtime.rollout.update
    if update is None:
        return []
    svc = runtime.spec.service
    target = svc.target_replicas
    old, new = f"v{update.from_version}", f"v{update.to_version}"
    surge = svc.max_surge_count(target)
    unavailable = svc.max_unavailable_count(target)
    return strategy_of(update.mode).plan_lines(old, new, target, surge, unavailable)


def _update(controller: Controller, runtime: ServiceRuntime) -> dict[str, Any] | None:
    update = runtime.rollout.update
    if update is None:
        return None
    replicas = runtime.replicas.values()
    ready = [r for r in replicas if r.status is ReplicaStatus.READY]
    events = [
        {
            "time": e.time,
            "replica": e.replica_id,
            "from": e.from_status,
            "to": e.to_status,
            "reason": e.reason,
        }
        for e in controller.store.events(runtime.name, limit=EVENTS_SHOWN)
        if e.time >= update.started_at - 1.0
    ]
    plan = runtime.plan
    return {
        "mode": update.mode,
        "from_version": update.from_version,
        "to_version": update.to_version,
        "status": update.status,
        "in_progress": update.status is UpdateStatus.IN_PROGRESS,
        "message": update.message,
        "started_at": update.started_at,
        "finished_at": update.finished_at,
        "target": runtime.spec.service.target_replicas,
        "old_ready": sum(1 for r in ready if r.version == update.from_version),
        "new_ready": sum(1 for r in ready if r.version == update.to_version),
        "plan": plan_lines(runtime),
        "step": {
            "launching": plan.launch,
            "stopping": [rid for rid, _ in plan.drain],
            "routable": sorted(plan.routable),
        },
        "events": events,
        # A shadow step's figures while it mirrors (controller/rollout/canary.py).
        "shadow": (runtime.canary.status_json() or {}).get("shadow"),
    }


def dashboard_json(controller: Controller, observer: Observer) -> dict[str, Any]:
    now = controller.clock.wall()
    traffic = observer.live()
    services = []
    for name, runtime in sorted(controller.services.items()):
        status = service_json(runtime)
        seen = traffic.get(name)
        port = seen.last.get("metrics_port") if seen is not None else None
        status["lb_metrics_url"] = f"http://127.0.0.1:{port}/metrics" if port else None
        for replica in status["replicas"]:
            replica["node"] = f"{replica['ip']} ({REGION})"
            replica["age_s"] = round(now - replica["launched_at"], 1)
        status["update"] = _update(controller, runtime)
        services.append(status)
    return {"time": now, "services": services}


def add_routes(app: web.Application, controller: Controller) -> Observer:
    """Register ``/metrics``, the dashboard's page and its JSON; return the observer
    the LB-report handler feeds."""
    observer = Observer(controller)
    app[OBSERVER_KEY] = observer
    collector = ControllerCollector(observer)
    routes = web.RouteTableDef()

    @routes.get("/metrics")
    async def metrics(request: web.Request) -> web.Response:
        body = render(collector)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    @routes.get("/dashboard")
    async def dashboard_root(request: web.Request) -> web.Response:
        raise web.HTTPFound("/dashboard/")

    @routes.get("/dashboard/")
    async def dashboard_page(request: web.Request) -> web.Response:
        return _file_response("index.html")

    @routes.get("/dashboard/static/{name}")
    async def dashboard_static(request: web.Request) -> web.Response:
        return _file_response(request.match_info["name"])

    @routes.get("/api/v1/dashboard")
    async def dashboard_data(request: web.Request) -> web.Response:
        return web.json_response(dashboard_json(controller, observer))

    @routes.get("/api/v1/dashboard/timeseries")
    async def timeseries(request: web.Request) -> web.Response:
        try:
            since = float(request.query.get("since", "0"))
        except ValueError:
            return web.json_response({"error": "since must be a number"}, status=400)
        series = {
            name: traffic.timeseries(since) for name, traffic in sorted(observer.live().items())
        }
        return web.json_response({"time": controller.clock.wall(), "services": series})

    app.add_routes(routes)
    return observer


def _file_response(name: str) -> web.Response:
    data = _static(name)
    if data is None:
        raise web.HTTPNotFound()
    suffix = name[name.rfind(".") :] if "." in name else ""
    return web.Response(
        body=data,
        headers={
            "Content-Type": STATIC_TYPES.get(suffix, "application/octet-stream"),
            "Cache-Control": "no-cache",
        },
    )
