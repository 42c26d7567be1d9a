"""The gateway's hot path: one port, several services, chosen by route prefix.

A Ray Serve config serves every application on one port under its
``route_prefix``. The gateway is a load balancer process whose client
connections are the usual :class:`ClientConnection`; only the dispatch differs:
:class:`GatewayProxy` reads the request's path, picks the service with the
longest matching prefix (Ray Serve's rule, :func:`match_prefix`), and hands the
exchange to that service's own :class:`Proxy` (a *lane*), which chooses a
replica, queues, retries and drains exactly as the service's endpoint does. No
second proxy hop: the lane talks to the replicas directly.

An OpenAI-style request may pick its service by model instead: when some
service declares ``service.served_model_names``, the gateway reads the
``"model"`` of the buffered JSON body (the first 64 KiB, already read before any
replica is chosen) and a known model selects that model's service whatever the
path; an unknown or absent model falls back to the route prefix. Gateways with
no model names pay nothing for this.

The path is forwarded whole, as Ray Serve does, and the matched prefix goes
with it in ``X-Steady-Root-Path`` (first among the headers), which the Python
runner hands its ASGI app as ``root_path``: Ray Serve's proxy sets ``root_path``
to the route prefix, and FastAPI routes and docs pages rely on it. It is read per
request, so an in-place ``route_prefix`` change needs no restart. An unknown
route is a 404 naming nothing internal; an OpenAI request (``/v1/...``) naming a
model no service serves, under no route prefix, is answered as vLLM answers it
(404, "The model `x` does not exist."), and ``GET /v1/models`` lists the served
model names in OpenAI's shape (lb/local_answer.py).

Ray Serve's proxy answers two paths itself, before any route: ``/-/healthz``
(200 ``success``; 503 ``Route table is not populated yet.`` until a route map
with an application has arrived, and 503 while the gateway drains) and
``/-/routes`` (the JSON map ``{route_prefix: application}``, or the same 503).
Ray's ``http_options.request_timeout_s`` is the gateway's own: a lane whose
service sets no shorter ``request_timeout_s`` answers Ray's 408 past it, and
breaks a response already under way as Ray's proxy does: the client connection
is reset (RST after what was written), so a client reads "Connection broken",
not a response that merely ended early.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import socket
import struct
import uuid
from typing import TYPE_CHECKING

from steadyserve.lb.balancer import Balancer
from steadyserve.lb.exchange import SENT
from steadyserve.lb.local_answer import (
    MODELS_PATH,
    UNKNOWN_MODEL,
    is_openai,
    models_answer,
    ray_json,
    ray_text,
    unknown_model_message,
)
from steadyserve.lb.metrics import LBMetrics
from steadyserve.lb.proxy import Exchange, Proxy
from steadyserve.lb.target import is_blocked
from steadyserve.wire.routes import Limits, RouteTable

if TYPE_CHECKING:
    from steadyserve.lb.downstream import ClientConnection

log = logging.getLogger("steadyserve.lb")

NOT_FOUND = "no application is served under this path"
RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
ROOT_PATH_HEADER = b"x-steady-root-path"
HEALTH_PATH = b"/-/healthz"
ROUTES_PATH = b"/-/routes"
OWN_PATHS = frozenset((HEALTH_PATH, ROUTES_PATH))
# Ray Serve's words (ray/serve/_private/constants.py).
HEALTHY_MESSAGE = "success"
NO_ROUTES_MESSAGE = "Route table is not populated yet."
REPLICA_FAILED_MESSAGE = "Internal Server Error"
DRAINING_MESSAGE = "This node is being drained."


def request_path(head: bytes) -> bytes:
    """The path of a request head (``GET /a/b?x HTTP/1.1`` -> ``/a/b``)."""
    start = head.find(b" ") + 1
    end = head.find(b" ", start)
    target = head[start:end] if end > 0 else head[start:]
    query = target.find(b"?")
    return target if query < 0 else target[:query]


def _is_blocked_in(path: bytes, prefix: bytes | None, blocked: frozenset[bytes]) -> bool:
    """Is ``path`` blocked as it is, or as the application under ``prefix`` sees it
    (a replica given the prefix as its root path routes on what follows it)?"""
    if is_blocked(path, blocked):
        return True
    if prefix is None or prefix == b"/":
        return False
    rest = path[len(prefix) :]
    return is_blocked(rest if rest[:1] == b"/" else b"/" + rest, blocked)


# A JSON string cannot hold a bare quote, so these bytes only match a key.
_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')


def request_model(pending: list[bytes] | None) -> bytes | None:
    """The ``model`` of a buffered OpenAI-style JSON body, undecoded; None if absent."""
    if not pending:
        return None
    found = _MODEL.search(pending[0] if len(pending) == 1 else b"".join(pending))
    return found.group(1) if found else None


def match_prefix(path: bytes, prefixes: list[bytes]) -> bytes | None:
    """The longest prefix ``path`` falls under, as Ray Serve's proxy matches it.

    ``prefixes`` is sorted longest first. ``/api`` matches ``/api`` and
    ``/api/x`` but not ``/apix``; ``/`` matches every path.
    """
    for prefix in prefixes:
        if path.startswith(prefix) and (
            prefix.endswith(b"/") or len(path) == len(prefix) or path[len(prefix)] == 47  # "/"
        ):
            return prefix
    return None


def with_root_path(head: bytes, prefix: bytes) -> bytes:
    """``head`` with ``X-Steady-Root-Path: prefix`` as its first header, so it wins
    over one a client sent (the runner reads the first)."""
    at = head.find(b"\r\n") + 2
    return b"%s%s: %s\r\n%s" % (head[:at], ROOT_PATH_HEADER, prefix, head[at:])


class _Counted(LBMetrics):
    """The gateway's metrics: a routed request is counted by its service's lane
    (which reports them as the service's entry "gateway"); only the gateway's own
    404s stay here.

    One dict pop more than a service's load balancer pays per request (the
    routed map is keyed by the exchange itself: no id(), no tuple)."""

    def __init__(self, gateway: GatewayProxy) -> None:
        super().__init__()
        self._routed = gateway.routed

    def record(self, ex: Exchange, client: ClientConnection) -> None:
        lane = self._routed.pop(ex, None)
        if lane is None:
            super().record(ex, client)
        else:
            lane.metrics.record(ex, client)


class GatewayProxy(Proxy):
    """Routes each exchange to the lane (a service's :class:`Proxy`) its path selects."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("gateway", Balancer(None), **kwargs)  # type: ignore[arg-type]
        self.lanes: dict[bytes, Proxy] = {}
        self.models: dict[bytes, Proxy] = {}
        self.apps: dict[str, str] = {}  # route prefix -> application, for /-/routes
        # Ray's proxy is ready once a route map with an application came, and stays so.
        self.populated = False
        self.request_timeout_s: float | None = None  # Ray's http_options, for new lanes
        self._order: list[bytes] = []
        # Exchange -> the lane it was handed to, until it is recorded or aborted.
        self.routed: dict[Exchange, Proxy] = {}
        self.metrics = _Counted(self)

    def set_lanes(
        self, lanes: dict[bytes, Proxy], models: dict[bytes, Proxy] | None = None
    ) -> None:
        """Install the prefix -> lane and model -> lane maps (requests already routed
        keep their lane)."""
        self.lanes = dict(lanes)
        self.models = dict(models or {})
        self._order = sorted(lanes, key=len, reverse=True)

    def set_apps(self, apps: dict[str, str]) -> None:
        """The ``/-/routes`` map; the first one naming an application makes the
        gateway healthy for good, as Ray's proxy router's populated route table."""
        self.apps = dict(apps)
        self.populated = self.populated or bool(apps)

    def answer_own(self, ex: Exchange, path: bytes) -> None:
        """``/-/healthz`` and ``/-/routes``, as Ray Serve's proxy answers them."""
        close = not ex.keep_alive or self.draining
        if self.draining or not self.populated:
            message = DRAINING_MESSAGE if self.draining else NO_ROUTES_MESSAGE
            self._respond(ex, 503, "", "not_ready", ray_text(503, message, close))
        elif path == HEALTH_PATH:
            self._respond(ex, 200, "", "health", ray_text(200, HEALTHY_MESSAGE, close))
        else:
            self._respond(ex, 200, "", "routes", ray_json(self.apps, close))

    def dispatch(self, ex: Exchange) -> None:
        path = request_path(ex.head)
        if path in OWN_PATHS:
            self.answer_own(ex, path)
            return
        models = self.models
        if models and path == MODELS_PATH and ex.head.startswith(b"GET "):
            # Every served model, as an OpenAI (or vLLM) server lists its own.
            listed = models_answer(models, close=not ex.keep_alive or self.draining)
            self._respond(ex, 200, "", "model_list", listed)
            return
        prefix = match_prefix(path, self._order)
        by_prefix = self.lanes.get(prefix) if prefix is not None else None
        lane = None
        model = None
        if models:
            model = request_model(ex.pending)
            lane = models.get(model) if model is not None else None
        if lane is None:
            lane = by_prefix
        elif lane is not by_prefix:
            prefix = None  # chosen by its model: no route prefix was matched for it
        if lane is None:
            if model is not None and is_openai(path):  # as vLLM answers a model it lacks
                self._respond(ex, 404, unknown_model_message(model), UNKNOWN_MODEL)
            else:
                self._respond(ex, 404, NOT_FOUND, "unknown_route")
            return
        blocked = lane.blocked_paths
        if blocked and _is_blocked_in(path, prefix, blocked):
            self._respond(ex, 404, NOT_FOUND, "blocked_path")
            return
        if prefix is not None and prefix != b"/":  # the runner's root_path, as Ray's proxy sets
            ex.head = with_root_path(ex.head, prefix)
        self.routed[ex] = lane
        lane.dispatch(ex)

    def abort(self, ex: Exchange) -> None:
        # Kept in ``routed``: its access-log line, which follows, is the lane's.
        lane = self.routed.get(ex)
        if lane is not None:
            lane.abort(ex)
        else:
            super().abort(ex)

    def begin_drain(self) -> None:
        super().begin_drain()
        for lane in self.lanes.values():
            lane.begin_drain()

    def sweep(self) -> None:
        super().sweep()
        for lane in self.lanes.values():
            lane.sweep()

    def close_all(self) -> None:
        super().close_all()
        for lane in self.lanes.values():
            lane.close_all()


def request_id_of(ex: Exchange) -> str:
    """The request's id as Ray names it in a 408: the one the load balancer gave it
    or the client's ``X-Request-Id``; else a new one, as Ray makes (a UUID)."""
    if ex.request_id is not None:
        return ex.request_id.decode("latin-1")
    lower = ex.head.lower()
    at = lower.find(b"\r\nx-request-id:")
    if at >= 0:
        end = lower.find(b"\r\n", at + 2)
        value = ex.head[at + 15 : end].strip(b" \t")
        if value:
            return value.decode("latin-1")
    return str(uuid.uuid4())


class LaneProxy(Proxy):
    """A service's lane on the gateway: the service's own proxy, under the gateway's
    ``request_timeout_s`` (Ray's ``http_options``) when that is the shorter one."""

    def __init__(self, service: str, balancer: Balancer, **kwargs: object) -> None:
        super().__init__(service, balancer, **kwargs)  # type: ignore[arg-type]
        self.gateway_timeout: float | None = None
        self.own_limits: Limits = self.limits
        self.by_gateway = False  # the timeout in force is the gateway's

    def apply_table(self, table: RouteTable) -> None:
        super().apply_table(table)
        self.own_limits = self.limits
        self._impose()

    def set_gateway_timeout(self, timeout: float | None) -> None:
        self.gateway_timeout = timeout
        self._impose()

    def _impose(self) -> None:
        own = self.own_limits
        timeout = self.gateway_timeout
        self.by_gateway = timeout is not None and (
            own.request_timeout_s is None or timeout < own.request_timeout_s
        )
        self.limits = (
            dataclasses.replace(own, request_timeout_s=timeout) if self.by_gateway else own
        )

    def _timed_out(self, ex: Exchange) -> None:
        conn = ex.upstream
        if self.by_gateway and conn is not None and conn.wrote and ex.state is SENT:
            # Ray's proxy breaks a streaming response its timeout cut: a reset, once
            # what was written is flushed (asyncio closes after the buffer drains).
            transport = ex.client.transport
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):  # gone already: closing is all that is left
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        super()._timed_out(ex)

    def answer_failed(self, ex: Exchange, message: str) -> None:
        # Ray's proxy answers a replica that died with the request (no retry left) so.
        close = not ex.keep_alive or self.draining
        self._respond(ex, 500, "", "replica_failed", ray_text(500, REPLICA_FAILED_MESSAGE, close))

    def answer_late(self, ex: Exchange) -> None:
        if not self.by_gateway:
            super().answer_late(ex)
            return
        # Ray's words (http_util.get_http_response_status): the timeout as a float.
        message = f"Request {request_id_of(ex)} timed out after {self.gateway_timeout}s."
        close = not ex.keep_alive or self.draining
        self._respond(ex, 408, "", "request_timeout", ray_text(408, message, close))
