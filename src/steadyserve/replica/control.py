"""The control port: health, reconfigure and info for the controller only.

It listens on loopback on its own port, which the load balancer never routes
to, so users cannot reach ``/-/reconfigure`` and probes never call ``__call__``.
Other local users can reach loopback, so when the controller hands the runner a
secret, every request must carry it (``X-Steady-Control-Secret``); without it
the answer is 401.
It starts before the user's ``__init__`` so a long model load shows as
"initializing" rather than as a replica that does not answer.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from steadyserve.oneline import one_line
from steadyserve.replica.app import OngoingLimit
from steadyserve.replica.loader import Target
from steadyserve.replica.user import UserClass
from steadyserve.serve import multiplex
from steadyserve.serve.ingress import docs_path
from steadyserve.wire import replica_contract as contract
from steadyserve.wire.routes import DOCS_PATH_QUERY as DOCS_PATH_FIELD

log = logging.getLogger("steadyserve.replica")


class Phase(str, enum.Enum):
    INITIALIZING = "initializing"  # control server up; __init__/reconfigure/app server not yet
    READY = "ready"  # the app port serves
    DRAINING = "draining"  # SIGTERM received: finishing in-flight requests


@dataclass
class ReplicaState:
    """What the control endpoints read; the server's lifecycle writes ``phase``."""

    target: Target
    health_check_timeout_s: float
    user: UserClass | None = None  # None for an ASGI app
    limit: OngoingLimit | None = None
    phase: Phase = Phase.INITIALIZING
    control_secret: str | None = None  # None: requests need no secret (a runner started by hand)
    shutdown: dict[str, float] | None = None  # the drain settings in effect, shown by /-/info


def control_app(state: ReplicaState) -> ASGIApp:
    async def healthz(request: Request) -> JSONResponse:
        if state.phase is not Phase.READY:
            return JSONResponse({"status": state.phase.value}, status_code=503)
        user = state.user
        if user is None or not user.has_check_health:
            return JSONResponse({"status": "ok"})
        timeout_s = state.health_check_timeout_s
        try:
            await user.check_health(timeout_s)
        except asyncio.TimeoutError:
            error = f"check_health did not return within {timeout_s:g}s"
            return JSONResponse({"status": "unhealthy", "error": error}, status_code=503)
        except Exception as exc:
            return JSONResponse({"status": "unhealthy", "error": one_line(exc)}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def reconfigure(request: Request) -> JSONResponse:
        user = state.user
        if user is None or not user.has_reconfigure:
            what = "an ASGI app" if user is None else f"class {user.name}"
            return _error(409, f"{what} has no reconfigure(self, user_config) method")
        if state.phase is Phase.INITIALIZING:
            return _error(503, "replica is initializing; retry once /-/healthz answers 200")
        try:
            user_config = json.loads(await request.body())
        except ValueError as exc:
            return _error(400, f"body must be the user_config as JSON ({exc})")
        try:
            await user.reconfigure(user_config)
        except Exception as exc:
            log.exception("%s.reconfigure failed", user.name)
            return _error(500, one_line(exc))
        return JSONResponse({"status": "ok"})

    async def info(request: Request) -> JSONResponse:
        limit = state.limit
        return JSONResponse(
            {
                "kind": state.target.kind,
                "options": state.target.options,
                "import_path": state.target.import_path,
                "pid": os.getpid(),
                "status": state.phase.value,
                "ongoing_requests": limit.ongoing if limit is not None else 0,
                "max_ongoing_requests": limit.limit if limit is not None else None,
                **(state.shutdown or {}),
                # Ray's docs path of the application this replica's ingress serves.
                DOCS_PATH_FIELD: docs_path(state.target.ingress or state.target.obj),
                # A multiplexed deployment's models, loaded or loading: the
                # controller puts them in the route table (serve/multiplex.py).
                **({"multiplexed_model_ids": multiplex.report()} if multiplex.declared() else {}),
            }
        )

    app = Starlette(
        routes=[
            Route("/-/healthz", healthz, methods=["GET"]),
            Route("/-/reconfigure", reconfigure, methods=["POST"]),
            Route("/-/info", info, methods=["GET"]),
        ]
    )
    if state.control_secret is None:
        return app
    return _RequireSecret(app, state.control_secret)


class _RequireSecret:
    """Refuse (401) any request without the controller's secret; constant-time compare."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        self.app = app
        self.secret = secret.encode()
        self.header = contract.CONTROL_SECRET_HEADER.lower().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers", []):
                if name == self.header:
                    given = value
            if not hmac.compare_digest(given, self.secret):
                response = _error(401, f"missing or wrong {contract.CONTROL_SECRET_HEADER}")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error(status: int, message: str) -> JSONResponse:
    payload: dict[str, Any] = {"error": message}
    return JSONResponse(payload, status_code=status)
