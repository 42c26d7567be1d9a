"""Ray's test helpers, ported thinly, for Ray Serve's own tests run against SteadyServe.

Ray's tests lean on a few of Ray's own testing tools besides ``serve``: constants
(``SERVE_DEFAULT_APP_NAME``), ``wait_for_condition``, ``SignalActor`` (an actor
that deployments and the test share to hold a request until the test lets it
go), ``ray.get`` on handle responses and the URL of the HTTP proxy. Each is here
with Ray's call signature, built on SteadyServe: ``SignalActor`` is a small HTTP
server in the test process that replicas call over loopback, ``ray.get``
resolves ``DeploymentResponse`` objects, ``base_url`` is the gateway at the port
the fixture chose (Ray's tests write ``localhost:8000``). ``ray.remote`` makes a
function's ``.remote()`` a call on a thread pool (Ray's tests use remote tasks to
send HTTP requests at once) and a class an actor living in the test process, as
``SignalActor`` does; ``send_signal_on_cancellation`` is Ray's serve test util.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import http.server
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Generator
from types import SimpleNamespace
from typing import Any

from steadyserve.serve.context import MODEL_ID_HEADER
from steadyserve.serve.handle import DeploymentResponse

SERVE_DEFAULT_APP_NAME = "default"
SERVE_MULTIPLEXED_MODEL_ID = MODEL_ID_HEADER
HTTP_PORT_ENV = "STEADY_SERVE_HTTP_PORT"


def base_url(host: str = "127.0.0.1") -> str:
    """Ray's ``http://127.0.0.1:8000`` at the gateway port this test's home uses."""
    return f"http://{host}:{os.environ.get(HTTP_PORT_ENV, '8000')}"


def get_application_url(
    protocol: str = "HTTP",
    app_name: str = SERVE_DEFAULT_APP_NAME,
    use_localhost: bool = True,
    is_websocket: bool = False,
    exclude_route_prefix: bool = False,
) -> str:
    """Ray's ``get_application_url``: the gateway's URL and the app's route prefix
    (none when excluded or when the app has no route), with no trailing ``/``."""
    from steadyserve.serve import api

    assert protocol == "HTTP", "SteadyServe's gateway speaks HTTP"
    prefixes = [
        svc.get("route_prefix")
        for svc in api.services(api.client())
        if svc.get("application") == app_name
    ]
    assert prefixes, f"App {app_name} not found in serve details."
    route = next((p for p in prefixes if p is not None), None)
    if exclude_route_prefix or route is None:
        route = ""
    scheme = "ws" if is_websocket else "http"
    # Ray's "localhost" is the loopback; the gateway listens on 127.0.0.1 only.
    return f"{scheme}://127.0.0.1:{os.environ.get(HTTP_PORT_ENV, '8000')}{route}".rstrip("/")


def wait_for_condition(
    condition_predictor: Callable[..., Any],
    timeout: float = 10,
    retry_interval_ms: float = 100,
    raise_exceptions: bool = False,
    **kwargs: Any,
) -> None:
    """Ray's ``wait_for_condition``: poll until the predicate is true, else RuntimeError."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if condition_predictor(**kwargs):
                return
        except Exception as exc:
            if raise_exceptions:
                raise
            last = exc
        time.sleep(retry_interval_ms / 1000)
    raise RuntimeError(f"The condition wasn't met before the timeout expired. Last: {last!r}")


def get(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get`` on handle responses (one or a list), on calls of a SignalActor or
    another test-process actor, and on remote functions' calls."""
    if isinstance(refs, list):
        return [get(r, timeout) for r in refs]
    if isinstance(refs, DeploymentResponse):
        return refs.result(timeout_s=timeout)
    if isinstance(refs, (_Call, concurrent.futures.Future)):
        return refs.result(timeout)
    return refs


class _RemoteFunction:
    """``@ray.remote def f``: ``f.remote(...)`` runs ``f`` on a thread of the test
    process and returns a future for ``ray.get``."""

    _pool = concurrent.futures.ThreadPoolExecutor(max_workers=32)

    def __init__(self, function: Callable[..., Any]) -> None:
        self._function = function

    def remote(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        return self._pool.submit(self._function, *args, **kwargs)


class _ActorClass:
    """``@ray.remote class C``: ``C.remote(...)`` makes the instance in the test
    process; its handle's ``h.method.remote(...)`` calls it over loopback, from
    the test or from a replica (handles pickle by reference)."""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        actor_id = uuid.uuid4().hex
        with _state.lock:
            _state.actors[actor_id] = self._cls(*args, **kwargs)
        return ActorHandle(_server_port(), actor_id)


class ActorHandle:
    def __init__(self, port: int, actor_id: str) -> None:
        self._port = port
        self._id = actor_id

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        port, actor_id = self._port, self._id

        class _ActorMethod:
            @staticmethod
            def remote(*args: Any) -> _Call:
                body = json.dumps(list(args)).encode()
                return _Call(port, f"/call/{actor_id}/{name}", False, body)

        return _ActorMethod()


def remote(target: Any = None, **_options: Any) -> Any:
    """``@ray.remote`` (and ``@ray.remote(num_cpus=...)``, its options ignored)."""
    if target is None:
        return remote
    return _ActorClass(target) if isinstance(target, type) else _RemoteFunction(target)


# Ray's exceptions as SteadyServe raises them: a callee's exception arrives as a
# RuntimeError (an instance of the callee's builtin exception type too).
GetTimeoutError = TimeoutError  # ``ray.get(..., timeout=)`` expiring (Ray's subclasses it)
ray = SimpleNamespace(get=get, remote=remote, exceptions=SimpleNamespace(RayTaskError=RuntimeError))


@contextlib.asynccontextmanager
async def send_signal_on_cancellation(signal_actor: SignalActor) -> Any:
    """Ray's serve test util: wait to be cancelled, then send ``signal_actor``;
    raises if the enclosing task was never cancelled."""
    cancelled = False
    try:
        await asyncio.sleep(100000)
    except asyncio.CancelledError:
        cancelled = True
        await signal_actor.send.remote()
    yield
    if not cancelled:
        raise RuntimeError("send_signal_on_cancellation: the task was not cancelled")


class _Call:
    """A started call to the signal server: ``await`` it, or ``.result()`` / ``ray.get``."""

    def __init__(self, port: int, path: str, long: bool, body: bytes | None = None) -> None:
        self._future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        # A send must reach the server even from ``__del__`` at exit: not a daemon.
        args = (port, path, long, body)
        thread = threading.Thread(target=self._run, args=args, daemon=long)
        thread.start()

    def _run(self, port: int, path: str, long: bool, body: bytes | None) -> None:
        # The awaiting task may be cancelled (a test ends with it pending), which
        # cancels the future: the outcome then has nowhere to go.
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120 if long else 10)
                try:
                    conn.request("POST", path, body)
                    response = conn.getresponse()
                    self._future.set_result(json.loads(response.read() or b"null"))
                finally:
                    conn.close()
            except Exception as exc:
                self._future.set_exception(exc)

    def result(self, timeout: float | None = None) -> Any:
        return self._future.result(timeout)

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self._future).__await__()


class _Method:
    def __init__(self, signal: SignalActor, name: str) -> None:
        self._signal = signal
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> _Call:
        clear = int(bool(kwargs.get("clear", args[0] if args else False)))
        server = self._signal._port
        return _Call(
            server, f"/{self._name}/{self._signal._id}?clear={clear}", self._name == "wait"
        )


class SignalActor:
    """Ray's ``SignalActor``: ``send``, ``wait`` and ``cur_num_waiters``, shared by the
    test and its replicas (pickled by reference; calls go to the test process)."""

    def __init__(self, port: int, signal_id: str) -> None:
        self._port = port
        self._id = signal_id

    @classmethod
    def remote(cls) -> SignalActor:
        return cls(_server_port(), uuid.uuid4().hex)

    @property
    def send(self) -> _Method:
        return _Method(self, "send")

    @property
    def wait(self) -> _Method:
        return _Method(self, "wait")

    @property
    def cur_num_waiters(self) -> _Method:
        return _Method(self, "cur_num_waiters")


class _State:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.ready: dict[str, bool] = {}
        self.waiters: dict[str, int] = {}
        self.actors: dict[str, Any] = {}  # ray.remote classes' instances, by id


_state = _State()
_server: http.server.ThreadingHTTPServer | None = None


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        if self.path.startswith("/call/"):
            self._call_actor()
            return
        path, _, query = self.path.partition("?")
        _, op, signal_id = path.split("/")
        clear = query.endswith("1")
        with _state.lock:
            if op == "send":
                _state.ready[signal_id] = not clear
                _state.lock.notify_all()
                value: Any = None
            elif op == "cur_num_waiters":
                value = _state.waiters.get(signal_id, 0)
            else:
                _state.waiters[signal_id] = _state.waiters.get(signal_id, 0) + 1
                _state.lock.wait_for(lambda: _state.ready.get(signal_id, False), timeout=110)
                _state.waiters[signal_id] -= 1
                if clear:
                    _state.ready[signal_id] = False
                value = None
        self._answer(value)

    def _call_actor(self) -> None:
        _, _, actor_id, method = self.path.split("/")
        args = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"[]")
        with _state.lock:  # one call at a time, as a Ray actor runs them
            value = getattr(_state.actors[actor_id], method)(*args)
        self._answer(sorted(value) if isinstance(value, (set, frozenset)) else value)

    def _answer(self, value: Any) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _server_port() -> int:
    global _server
    if _server is None:
        _server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        _server.daemon_threads = True
        threading.Thread(target=_server.serve_forever, daemon=True).start()
    return int(_server.server_address[1])


class RequestRouter:
    """Ray's request-router base class, so a file defining a custom router imports.
    SteadyServe accepts ``request_router_class`` and routes with the service's
    ``load_balancing_policy`` (named on stderr)."""

    async def choose_replicas(
        self, candidate_replicas: list[Any], pending_request: Any = None
    ) -> list[list[Any]]:
        raise NotImplementedError


PendingRequest = Any
RunningReplica = Any


def get_or_create_event_loop() -> asyncio.AbstractEventLoop:
    """Ray's ``get_or_create_event_loop``: the running loop, else a new one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.new_event_loop()


class ServeSubmissionClient:
    """Ray's dashboard REST client for Serve configs, on SteadyServe's deploy surface:
    ``deploy_applications`` is ``steady deploy`` of the config (written as a file in
    a folder where this repository's ``tests`` package resolves, as ``ray.serve.tests``
    does on Ray's path); ``delete_applications`` is what Ray's dashboard runs for it,
    ``serve.shutdown()``. The address is Ray's dashboard's: not used."""

    def __init__(self, dashboard_head_address: str) -> None:
        self._address = dashboard_head_address

    def deploy_applications(self, config: dict[str, Any]) -> None:
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        tests = Path(__file__).resolve().parents[3]
        with tempfile.TemporaryDirectory(prefix="steady-rayport-config-") as folder:
            os.symlink(tests, Path(folder) / "tests")
            path = Path(folder) / "serve_config.json"  # JSON is YAML
            path.write_text(json.dumps(config))
            proc = subprocess.run(
                [sys.executable, "-m", "steadyserve.cli", "deploy", str(path)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )
        assert proc.returncode == 0, f"steady deploy: {proc.stdout}{proc.stderr}"

    def delete_applications(self) -> None:
        from steadyserve import serve

        serve.shutdown()
