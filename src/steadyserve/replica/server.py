"""Host one replica: two uvicorn servers in one event loop, and its lifecycle.

Order matters to the controller: the control server comes up first (so a long
``__init__`` reads as "initializing"), then ``__init__`` and the first
``reconfigure``, then the app server; only then does ``/-/healthz`` answer 200.
If ``__init__`` or that first ``reconfigure`` raises, the traceback goes to the
log and the exit code is 1, which the controller reads as a broken version.

Signals are handled here, once for both servers (uvicorn's own handlers are
switched off): the first SIGTERM/SIGINT stops the app server from accepting,
lets in-flight requests finish within ``graceful_shutdown_timeout_s``, unloads
the multiplexed models and calls the instance's ``__del__`` (as Ray does) in
what is left of that time, then stops the control server and exits 0. A second
signal skips the waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import sys
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import uvicorn

from steadyserve.home import unix_socket
from steadyserve.replica.app import (
    CancelOnDisconnect,
    ClassApp,
    ModelIdHeader,
    OngoingLimit,
    RootPath,
)
from steadyserve.replica.calls import CallApp
from steadyserve.replica.control import Phase, ReplicaState, control_app
from steadyserve.replica.loader import Target
from steadyserve.replica.settings import Settings
from steadyserve.replica.user import UserClass
from steadyserve.serve import context, multiplex
from steadyserve.serve import handle as handles
from steadyserve.serve.ingress import BUILD_METHOD, LateApp
from steadyserve.wire import replica_contract as contract

log = logging.getLogger("steadyserve.replica")

MAX_REQUEST_THREADS = 512
CONTROL_SHUTDOWN_S = 2
KILL_MARGIN_S = 0.5  # the user's cleanup ends this long before the controller's kill
MIN_RELEASE_S = 1.0
KEEP_ALIVE_S = 15  # longer than the load balancer keeps an idle upstream connection


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to ``ReplicaServer``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def install_signal_handlers(self) -> None:  # the same hook in older uvicorn releases
        pass


def _config(
    app: Any, port: int, host: str, lifespan: Literal["auto", "off"], graceful_s: float
) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan=lifespan,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=math.ceil(graceful_s),
    )


async def _serve(server: _Server, sockets: list[socket.socket] | None = None) -> bool:
    """Run ``server`` to the end; False if it could not start (uvicorn exits the
    process on a bind or lifespan failure; here that stays an outcome)."""
    try:
        await server.serve(sockets)
    except SystemExit:
        return False
    return server.started


def _app_sockets(s: Settings) -> list[socket.socket]:
    """The app server's TCP socket and its Unix socket (``call_socket``), bound here
    so one server (one ASGI lifespan, one ongoing count) serves both. Handle calls
    from replicas in their own network namespace arrive on the Unix one."""
    assert s.call_socket is not None
    tcp = socket.socket(socket.AF_INET6 if ":" in s.host else socket.AF_INET)
    try:
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((s.host, s.port))
        tcp.listen(2048)
        return [tcp, unix_socket.bind_private(Path(s.call_socket))]
    except BaseException:
        tcp.close()
        raise


class ReplicaServer:
    """One replica process: the user's target behind the app and control servers."""

    def __init__(self, target: Target, settings: Settings) -> None:
        self.target = target
        self.settings = settings
        workers = max(1, min(settings.max_ongoing_requests, MAX_REQUEST_THREADS))
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="replica-call")
        self.user = (
            UserClass(target.obj, self.executor, target.init_args, target.init_kwargs)
            if target.is_class
            else None
        )
        if self.user is not None:
            multiplex.declare_from(self.user.cls)
        inner = target.obj if self.user is None else ClassApp(self.user)
        if target.ingress is not None:  # @serve.ingress(app): the app answers HTTP
            inner = target.ingress
        # Handle calls (POST /-/steady/call) count against max_ongoing_requests too.
        calls = ModelIdHeader(
            CancelOnDisconnect(CallApp(RootPath(inner), self.user, settings.graph_secret))
        )
        self.limit = OngoingLimit(calls, settings.max_ongoing_requests)
        self.state = ReplicaState(
            target,
            settings.health_check_timeout_s,
            self.user,
            self.limit,
            control_secret=settings.control_secret,
            shutdown={
                "graceful_shutdown_timeout_s": settings.graceful_shutdown_timeout_s,
                "graceful_shutdown_wait_loop_s": settings.graceful_shutdown_wait_loop_s,
            },
        )
        self.stop = asyncio.Event()
        self.servers: list[_Server] = []

    async def run(self) -> int:
        """The whole life of the replica; returns the process exit code."""
        s = self.settings
        control = _Server(
            _config(control_app(self.state), s.control_port, s.host, "off", CONTROL_SHUTDOWN_S)
        )
        control_task = asyncio.create_task(_serve(control))
        self.servers.append(control)
        try:
            if not await self._started(control, control_task):
                _say(f"cannot serve the control port {s.host}:{s.control_port}")
                return 1
            self._install_signal_handlers()
            return await self._run_user(control_task)
        finally:
            control.should_exit = True
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(control_task, CONTROL_SHUTDOWN_S + 3)
            self.executor.shutdown(wait=False, cancel_futures=True)

    async def _run_user(self, control_task: asyncio.Task[bool]) -> int:
        s = self.settings
        if self.user is not None and not await self._initialize(self.user):
            return 0 if self.stop.is_set() else 1
        plain_class = self.target.is_class and self.target.ingress is None
        lifespan: Literal["auto", "off"] = "off" if plain_class else "auto"
        app = _Server(_config(self.limit, s.port, s.host, lifespan, s.graceful_shutdown_timeout_s))
        sockets = None
        if s.call_socket is not None:
            try:
                sockets = _app_sockets(s)
            except OSError as exc:
                _say(f"cannot listen on {s.host}:{s.port} and {s.call_socket}: {exc}")
                return 1
        try:
            return await self._serve_app(app, sockets, control_task)
        finally:
            if s.call_socket is not None:
                unix_socket.remove(Path(s.call_socket))

    async def _serve_app(
        self, app: _Server, sockets: list[socket.socket] | None, control_task: asyncio.Task[bool]
    ) -> int:
        s = self.settings
        app_task = asyncio.create_task(_serve(app, sockets))
        self.servers.append(app)
        if not await self._started(app, app_task):
            if self.stop.is_set():
                return 0
            _say(f"the app server on {s.host}:{s.port} did not start (see the error above)")
            return 1
        self.state.phase = Phase.READY
        log.info(
            "%s ready on %s:%d (control port %d)",
            self.target.import_path,
            s.host,
            s.port,
            s.control_port,
        )
        stop_task = asyncio.create_task(self.stop.wait())
        await asyncio.wait({stop_task, app_task, control_task}, return_when=asyncio.FIRST_COMPLETED)
        if not self.stop.is_set():
            stop_task.cancel()
            app.should_exit = True
            _say("a server stopped unexpectedly; exiting")
            return 1
        self.state.phase = Phase.DRAINING
        app.should_exit = True
        # In-flight requests finish; checked every graceful_shutdown_wait_loop_s,
        # for at most graceful_shutdown_timeout_s (uvicorn cuts them off then).
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        deadline = stopped_at + s.graceful_shutdown_timeout_s + 5
        while not app_task.done() and loop.time() < deadline:
            left = deadline - loop.time()
            await asyncio.wait({app_task}, timeout=min(s.graceful_shutdown_wait_loop_s, left))
        if not app_task.done():
            log.warning("in-flight requests still running after the graceful timeout")
        # The controller kills the process graceful_shutdown_timeout_s after its
        # signal: the user's cleanup gets what is left of that (at least a moment).
        left = stopped_at + s.graceful_shutdown_timeout_s - loop.time() - KILL_MARGIN_S
        await self._release_user(max(MIN_RELEASE_S, left))
        return 0

    async def _release_user(self, timeout_s: float) -> None:
        """Unload the multiplexed models (each model's ``__del__``), then the
        instance's own ``__del__``, as Ray's replica does on a graceful stop."""

        async def release() -> None:
            await multiplex.shutdown()
            if self.user is not None:
                await self.user.delete()

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            await asyncio.wait_for(release(), timeout_s)
        except asyncio.TimeoutError:
            log.warning("__del__ did not return within %.1fs of the stop", timeout_s)
        except Exception:
            log.exception("__del__ raised while the replica stopped")
        # What __del__ sent through a handle reaches its callee before the exit.
        await asyncio.to_thread(handles.settle, deadline - loop.time())

    async def _initialize(self, user: UserClass) -> bool:
        """``__init__`` then, with a user_config, ``reconfigure``; False if either
        raised (traceback printed) or a signal came first."""
        init = asyncio.ensure_future(self._construct(user))
        stop_task = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({init, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        stop_task.cancel()
        if not init.done():  # stopped mid-__init__: its daemon thread dies with us
            init.cancel()
            return False
        return init.result()

    async def _construct(self, user: UserClass) -> bool:
        step = f"{user.name}.__init__()"
        replica = _replica_context(self.target, user)
        context.set_replica_context(replica)  # Ray's constructors may read it
        try:
            await user.construct()
            replica.servable_object = user.instance
            if isinstance(self.target.ingress, LateApp):  # Ray's late-bound ingress
                step = f"{user.name}.{BUILD_METHOD}()"
                await self.target.ingress.build(user.instance)
            if self.settings.user_config is not None:
                step = f"{user.name}.reconfigure(user_config)"
                await user.reconfigure(self.settings.user_config)
        except (Exception, SystemExit) as exc:  # sys.exit() in __init__ is a failure too
            _say(f"{step} raised; the replica cannot start:")
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
            return False
        return True

    async def _started(self, server: _Server, task: asyncio.Task[bool]) -> bool:
        """Wait until ``server`` listens, or its task ended (it could not start)."""
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        return server.started and not task.done()

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: int) -> None:
        if not self.stop.is_set():
            log.info("%s: finishing in-flight requests, then exiting", signal.Signals(sig).name)
            self.stop.set()
            for server in self.servers:
                if server is not self.servers[0]:  # the control server stops last
                    server.should_exit = True
            return
        log.warning("second %s: exiting without waiting", signal.Signals(sig).name)
        for server in self.servers:
            server.should_exit = True
            server.force_exit = True


def _replica_context(target: Target, user: UserClass) -> context.ReplicaContext:
    """Who this replica is, in Ray's terms: its deployment, application and number."""
    env = os.environ
    deployment = target.deployment_name or user.name
    app = env.get(contract.APP_NAME) or "default"
    replica_id = env.get(contract.REPLICA_ID) or str(os.getpid())
    service = env.get(contract.SERVICE_NAME, "")
    ids = context.ReplicaID(replica_id, context.DeploymentID(deployment, app))
    return context.ReplicaContext(ids, None, service)


def _say(message: str) -> None:
    print(f"steadyserve.replica: {message}", file=sys.stderr, flush=True)
