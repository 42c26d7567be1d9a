"""``DeploymentHandle``: call another deployment of the graph, as in Ray Serve.

    translation = await self.translator.translate.remote(text)      # async code
    translation = self.translator.translate.remote(text).result()   # sync code
    async for word in self.translator.options(stream=True).words.remote(text): ...

Calls go straight to the callee service's replicas (``router.ServiceRouter``),
never through a load balancer or gateway. All of a process's handles share one
background event loop in a daemon thread, so a response can be awaited from any
event loop or waited for from any thread.

Where the callee's replicas are: the controller's route table for the service
named by ``STEADY_GRAPH_SERVICES`` (or the default name of the deployment), read
through ``STEADY_CONTROLLER_FILE``; or ``STEADY_GRAPH_ROUTES`` (JSON
``{service: "host:port,..."}``) when running by hand.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from steadyserve.home.paths import Home
from steadyserve.serve import context, wire
from steadyserve.serve.context import MODEL_ID_HEADER, DeploymentID, ReplicaID
from steadyserve.serve.exceptions import RayServeException
from steadyserve.serve.names import default_service_name
from steadyserve.wire import replica_contract as contract

if TYPE_CHECKING:  # the HTTP client is imported by the first call, not by every replica
    import aiohttp

    from steadyserve.serve.router import ServiceRouter

T = TypeVar("T")

CONTROLLER_FILE = contract.CONTROLLER_FILE
GRAPH_SECRET = contract.GRAPH_SECRET
GRAPH_SERVICES = "STEADY_GRAPH_SERVICES"
GRAPH_ROUTES = "STEADY_GRAPH_ROUTES"
HANDLE_WAIT_S = "STEADY_HANDLE_WAIT_S"
DEFAULT_WAIT_S = 60.0


class _Runtime:
    """The background loop every handle of this process uses, started on first call."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.routers: dict[str, ServiceRouter] = {}
        self.session: aiohttp.ClientSession | None = None
        # Calls not answered yet, so a stopping replica can let them finish (settle).
        self.pending: set[concurrent.futures.Future[Any]] = set()
        thread = threading.Thread(target=self.loop.run_forever, name="steady-handles", daemon=True)
        thread.start()
        atexit.register(self.close)

    def close(self) -> None:
        """Close the connection pool at exit (quietly; the loop's thread is a daemon)."""
        if self.session is not None and not self.loop.is_closed():
            with contextlib.suppress(Exception):
                self.submit(self.session.close()).result(timeout=2)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self.pending.add(future)
        future.add_done_callback(self.pending.discard)
        return future

    def router(self, service: str) -> ServiceRouter:
        """On the runtime's loop only."""
        import aiohttp

        from steadyserve.serve.router import ServiceRouter

        router = self.routers.get(service)
        if router is None:
            if self.session is None:
                # One connection per call: a stopping replica never gets a call on
                # a kept-alive connection it is about to close.
                connector = aiohttp.TCPConnector(force_close=True, limit=0)
                self.session = aiohttp.ClientSession(
                    connector=connector, timeout=aiohttp.ClientTimeout(total=None, connect=10)
                )
            router = ServiceRouter(service, self.session, _wait_s())
            static = _json_env(GRAPH_ROUTES).get(service)
            controller_file = os.environ.get(CONTROLLER_FILE)
            home = Home(Path(controller_file).parent) if controller_file else _driver_home
            token = os.environ.get(contract.ROUTES_TOKEN) or _driver_token
            # Set only in a network namespace of its own (docs/isolation.md).
            routes_socket = os.environ.get(contract.ROUTES_SOCKET) or None
            router.start(home, static if isinstance(static, str) else None, token, routes_socket)
            self.routers[service] = router
        return router


_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()
_graph_secret: str | None = os.environ.get(GRAPH_SECRET) or None
# A driver script (serve.run) is no replica: it follows its home's controller.
_driver_home: Home | None = None
_driver_token: str | None = None


def runtime() -> _Runtime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _Runtime()
        return _runtime


def settle(timeout_s: float) -> None:
    """Wait, at most ``timeout_s``, for this process's handle calls to be answered.

    A stopping replica calls it after ``__del__``: a ``.remote()`` made there (Ray's
    test_replica_upgrade_to_cleanup_resource records an unloaded model so) is
    delivered, as Ray delivers an actor call, instead of dying with the process."""
    found = _runtime
    if found is not None and found.pending:
        concurrent.futures.wait(list(found.pending), timeout=max(0.0, timeout_s))


def set_graph_secret(secret: str | None) -> None:
    """The runner hands over the secret it took out of the environment."""
    global _graph_secret
    _graph_secret = secret or None


def connect_driver(home: Home, routes_token: str, graph_secret: str) -> None:
    """Let this process's handles (a driver script's) follow ``home``'s route tables
    and send pickle, as a replica of that home does."""
    global _driver_home, _driver_token
    _driver_home, _driver_token = home, routes_token
    # That home's secret, also when the driver followed another home before: its
    # replicas pickle with this one (a kept one made every pickled answer unreadable).
    set_graph_secret(graph_secret)


def forget_routers() -> None:
    """Drop every router (after ``serve.shutdown``: the services are gone)."""
    rt = _runtime
    if rt is None:
        return

    async def close() -> None:
        for router in rt.routers.values():
            router.stop()
        rt.routers.clear()

    with contextlib.suppress(Exception):
        rt.submit(close()).result(timeout=5)


def service_for(deployment_name: str) -> str:
    """The service a handle to ``deployment_name`` calls."""
    mapped = _json_env(GRAPH_SERVICES).get(deployment_name)
    return mapped if isinstance(mapped, str) else default_service_name(deployment_name)


class DeploymentHandle:
    """A handle to one deployment; ``.remote()`` calls ``__call__``, ``.name.remote()``
    calls method ``name``; ``.options(method_name=, stream=)`` returns a new handle."""

    def __init__(
        self,
        deployment_name: str,
        app_name: str = "default",
        *,
        service: str | None = None,
        method_name: str = "__call__",
        stream: bool = False,
        multiplexed_model_id: str = "",
    ) -> None:
        self.deployment_name = deployment_name
        self.app_name = app_name
        self._service = service or service_for(deployment_name)
        self._method_name = method_name
        self._stream = stream
        self._model_id = multiplexed_model_id

    def options(
        self,
        *,
        method_name: str | None = None,
        stream: bool | None = None,
        multiplexed_model_id: str | None = None,
        **other: Any,
    ) -> DeploymentHandle:
        for key in other:
            if key not in ("use_new_handle_api", "_prefer_local_routing"):
                raise TypeError(f"DeploymentHandle.options: unknown option {key!r}")
        if multiplexed_model_id is not None and not isinstance(multiplexed_model_id, str):
            raise TypeError("DeploymentHandle.options: multiplexed_model_id must be a string")
        return DeploymentHandle(
            self.deployment_name,
            self.app_name,
            service=self._service,
            method_name=self._method_name if method_name is None else method_name,
            stream=self._stream if stream is None else stream,
            multiplexed_model_id=(
                self._model_id if multiplexed_model_id is None else multiplexed_model_id
            ),
        )

    @property
    def service(self) -> str:
        """The service this handle calls (a property: a method may be named alike)."""
        return self._service

    @property
    def is_initialized(self) -> bool:
        """Ray's: whether this process follows the callee's replicas yet."""
        rt = _runtime
        return rt is not None and self._service in rt.routers

    def _init(self) -> None:
        """Ray's: start following the callee's replicas before the first call."""
        rt = runtime()

        async def start() -> None:
            rt.router(self._service)

        rt.submit(start()).result(timeout=10)

    def _request_router(self) -> RequestRouterView:
        """What this process knows of the callee's replicas (Ray's private request
        router, as Ray's tests read it): each one's multiplexed model ids."""
        if not self.is_initialized:
            self._init()
        return RequestRouterView(runtime().routers[self._service], self)

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        rt = runtime()
        call = _call(
            rt, self._service, self._method_name, self._stream, args, kwargs, self._model_id
        )
        future = rt.submit(call if self._stream else _single(call))
        context.track_call(future)  # a cancelled request cancels it (replica/app.py)
        if self._stream:
            return DeploymentResponseGenerator(rt, future)
        return DeploymentResponse(future)

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment={self.deployment_name!r}, service={self._service!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        names = (self.deployment_name, self.app_name, self._service, self._method_name)
        return (_rebuild, (*names, self._stream, self._model_id))


class RunningReplica:
    """One replica as Ray's router lists it: its id and the models it holds."""

    def __init__(self, replica_id: ReplicaID, model_ids: frozenset[str]) -> None:
        self.replica_id = replica_id
        self.multiplexed_model_ids = set(model_ids)

    def __repr__(self) -> str:
        return f"RunningReplica({self.replica_id.unique_id}, {sorted(self.multiplexed_model_ids)})"


class RequestRouterView:
    """Ray's ``curr_replicas``: replica tag -> :class:`RunningReplica`, read live from
    the handle's route table (the models are the replicas' own reports)."""

    def __init__(self, router: ServiceRouter, handle: DeploymentHandle) -> None:
        self._router = router
        self._deployment = DeploymentID(handle.deployment_name, handle.app_name)

    @property
    def curr_replicas(self) -> dict[str, RunningReplica]:
        out = {}
        for rid, models in self._router.replica_models().items():
            replica_id = ReplicaID(str(rid), self._deployment)
            out[replica_id.to_full_id_str()] = RunningReplica(replica_id, models)
        return out


def _rebuild(
    deployment: str, app: str, service: str, method: str, stream: bool, model_id: str = ""
) -> DeploymentHandle:
    return DeploymentHandle(
        deployment,
        app,
        service=service,
        method_name=method,
        stream=stream,
        multiplexed_model_id=model_id,
    )


class DeploymentResponse:
    """The future result of a call: ``await`` it, or ``.result()`` in sync code."""

    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self._future = future

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self._future).__await__()

    def result(self, *, timeout_s: float | None = None) -> Any:
        """Wait in sync code; inside an event loop it would stall every other request
        of the replica, so there (as in Ray) it raises: ``await`` the response."""
        _refuse_in_event_loop("`await response`")
        return self._future.result(timeout_s)

    def cancel(self) -> None:
        self._future.cancel()

    def __reduce__(self) -> tuple[Any, ...]:
        # Only a top-level argument is resolved before a call is sent (as in Ray);
        # one inside a list or dict would reach the callee as a dead future.
        raise RayServeException(
            "`DeploymentResponse` is not serializable. If you are passing the "
            "`DeploymentResponse` in a nested object (e.g. a list or dictionary) to a "
            "downstream deployment handle call, that is no longer supported. Please "
            "only pass `DeploymentResponse` objects as top level arguments."
        )


class DeploymentResponseGenerator:
    """A streamed call: ``async for`` (or ``for`` in sync code) over what the
    callee's generator yields, each item as soon as it is sent."""

    def __init__(self, rt: _Runtime, stream: concurrent.futures.Future[Any]) -> None:
        self._rt = rt
        self._stream = stream  # resolves to the async iterator living on the runtime's loop

    def __aiter__(self) -> DeploymentResponseGenerator:
        return self

    async def __anext__(self) -> Any:
        items = await asyncio.wrap_future(self._stream)
        future = self._rt.submit(_next(items))
        value, done = await asyncio.wrap_future(future)
        if done:
            raise StopAsyncIteration
        return value

    def __iter__(self) -> DeploymentResponseGenerator:
        return self

    def __next__(self) -> Any:
        _refuse_in_event_loop("`async for` or `await response.__anext__()`")
        items = self._stream.result()
        value, done = self._rt.submit(_next(items)).result()
        if done:
            raise StopIteration
        return value

    def cancel(self) -> None:
        if self._stream.done() and not self._stream.cancelled():
            items = self._stream.result()
            self._rt.submit(items.aclose())
        else:
            self._stream.cancel()


def _refuse_in_event_loop(instead: str) -> None:
    """Ray's refusal, word for word: blocking there stalls every other request."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "Sync methods should not be called from within an `asyncio` event loop. "
        f"Use {instead} instead."
    )


async def _next(items: AsyncIterator[Any]) -> tuple[Any, bool]:
    try:
        return await items.__anext__(), False
    except StopAsyncIteration:
        return None, True


async def _single(call: Coroutine[Any, Any, AsyncGenerator[Any, None]]) -> Any:
    items = await call
    try:
        async for value in items:
            return value
    finally:
        await items.aclose()  # releases the replica now, not at garbage collection
    raise wire.WireError("the callee answered without a value")


async def _resolve(value: Any) -> Any:
    """A ``DeploymentResponse`` passed as an argument is awaited first, as in Ray."""
    if isinstance(value, DeploymentResponse):
        return await asyncio.wrap_future(value._future)
    return value


async def _call(
    rt: _Runtime,
    service: str,
    method: str,
    stream: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    model_id: str = "",
) -> AsyncGenerator[Any, None]:
    """Send the call; return an iterator over the answer's values (one unless streamed)."""
    resolved_args = [await _resolve(a) for a in args]
    resolved_kwargs = {k: await _resolve(v) for k, v in kwargs.items()}
    secret = _graph_secret
    trusted = secret is not None
    body = wire.encode({"args": resolved_args, "kwargs": resolved_kwargs}, allow_pickle=trusted)
    headers = {
        wire.METHOD_HEADER: method,
        wire.STREAM_HEADER: "1" if stream else "0",
        "Content-Type": wire.CONTENT_TYPE,
    }
    if secret is not None:
        headers[wire.GRAPH_SECRET_HEADER] = secret
    if model_id:
        headers[MODEL_ID_HEADER] = model_id
    router = rt.router(service)
    replica, response = await router.post(headers, body, model_id or None)
    return _values(router, replica, response, trusted)


async def _values(
    router: ServiceRouter, replica: Any, response: aiohttp.ClientResponse, trusted: bool
) -> AsyncGenerator[Any, None]:
    try:
        if response.content_type != wire.CONTENT_TYPE:
            text = (await response.text())[:200].strip()
            raise wire.CallError(
                "HTTPError", f"{router.service} answered {response.status}: {text}"
            )
        reader = wire.FrameReader(allow_pickle=trusted)
        async for chunk in response.content.iter_any():
            reader.feed(chunk)
            for value in reader.values():
                yield value
        if reader.pending:
            raise wire.CallError(
                "ConnectionError", f"the {router.service} replica stopped mid-answer"
            )
    finally:
        response.release()
        router.release(replica)


def _wait_s() -> float:
    try:
        return float(os.environ.get(HANDLE_WAIT_S, DEFAULT_WAIT_S))
    except ValueError:
        return DEFAULT_WAIT_S


def _json_env(name: str) -> dict[str, Any]:
    raw = os.environ.get(name)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
