"""Ray Serve's driver API end to end: ``serve.run`` from this (driver) process to a
real controller, replicas unpickling the app, handles from the script, the
gateway on 127.0.0.1 and ::1, function deployments, the replica context, model
multiplexing and batching inside replicas, ``steady status`` seeing the apps.
One controller for the module."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steadyserve import serve
from tests.helpers.steady import Steady, processes_of_home

RAY_SYNC_REFUSAL = (
    "Sync methods should not be called from within an `asyncio` event loop."
    " Use `await response` instead."
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def driver() -> Iterator[tuple[Steady, int]]:
    """A home, its gateway port, and this process as the driver of that home."""
    saved = {k: os.environ.get(k) for k in ("STEADY_HOME", "STEADY_SERVE_HTTP_PORT")}
    with tempfile.TemporaryDirectory(prefix="steady-serve-") as tmp:
        home = Path(tmp) / "home"
        port = free_port()
        os.environ["STEADY_HOME"] = str(home)
        os.environ["STEADY_SERVE_HTTP_PORT"] = str(port)
        cli = Steady(home)
        try:
            yield cli, port
        finally:
            serve.shutdown()
            cli.run("down", "--all", check=False, timeout=120)
            cli.run("controller", "stop", check=False, timeout=60)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            deadline = time.monotonic() + 10
            while processes_of_home(home) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = processes_of_home(home)
            for proc in left:
                proc.kill()
            assert not left, f"orphans: {[p.cmdline() for p in left]}"


def get(host: str, port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_run_returns_a_handle_and_serves_http_on_both_loopbacks(
    driver: tuple[Steady, int],
) -> None:
    cli, port = driver

    @serve.deployment
    class Greeter:  # defined in a function: only shipping by value can bring it
        def __init__(self, greeting: str) -> None:
            self.greeting = greeting

        async def __call__(self, request: Any) -> str:
            name = request if isinstance(request, str) else request.query_params["name"]
            return f"{self.greeting}, {name}"

        def count(self, n: int) -> Any:
            yield from range(n)

    handle = serve.run(Greeter.bind("hello"), name="greet", route_prefix="/greet")
    assert handle.remote("ray").result() == "hello, ray"
    assert list(handle.options(stream=True).count.remote(3)) == [0, 1, 2]

    async def awaited() -> str:
        return str(await handle.remote("async"))

    assert asyncio.run(awaited()) == "hello, async"
    assert get("127.0.0.1", port, "/greet?name=v4") == (200, "hello, v4")
    assert get("::1", port, "/greet?name=v6") == (200, "hello, v6")
    assert serve.status().applications["greet"].status == "RUNNING"
    assert '"greet-greeter"' in cli.run("status", "--json").stdout
    assert serve.get_app_handle("greet").remote("again").result() == "hello, again"


def test_function_deployment_sees_its_replica_context(driver: tuple[Steady, int]) -> None:
    _, port = driver

    @serve.deployment
    def where(request: Any) -> str:
        context = serve.get_replica_context()
        return f"{context.app_name}/{context.deployment}"

    serve.run(where.bind(), name="fn", route_prefix="/fn")
    assert get("127.0.0.1", port, "/fn") == (200, "fn/where")


def test_multiplexed_calls_reach_the_replica_holding_the_model(
    driver: tuple[Steady, int],
) -> None:
    _, port = driver

    @serve.deployment(num_replicas=2)
    class Models:
        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> str:
            return f"{model_id}@{os.getpid()}"

        async def __call__(self, request: Any) -> str:
            return str(await self.get_model(serve.get_multiplexed_model_id()))

    handle = serve.run(Models.bind(), name="mux", route_prefix="/mux")
    answers = {handle.options(multiplexed_model_id="m1").remote("x").result() for _ in range(6)}
    assert len(answers) == 1 and answers.pop().startswith("m1@")
    status, body = get("127.0.0.1", port, "/mux", {"serve_multiplexed_model_id": "m2"})
    assert status == 200 and body.startswith("m2@")


def test_a_model_sticks_to_one_replica_from_the_moment_run_returns(
    driver: tuple[Steady, int],
) -> None:
    """The route table that first lists a multiplexed replica says so (its models
    are read before it turns READY), so the gateway reads the model header from the
    first request: four concurrent requests for one new model land on one replica,
    where least-load alone would spread them over both."""
    _, port = driver

    @serve.deployment(num_replicas=2, max_ongoing_requests=8)
    class SlowModels:
        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> str:
            return f"{model_id}@{os.getpid()}"

        async def __call__(self, request: Any) -> str:
            model = await self.get_model(serve.get_multiplexed_model_id())
            await asyncio.sleep(0.5)
            return str(model)

    serve.run(SlowModels.bind(), name="mux-first", route_prefix="/mux-first")
    header = {"serve_multiplexed_model_id": "first"}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: get("127.0.0.1", port, "/mux-first", header), range(4)))
    assert {status for status, _ in answers} == {200}
    assert len({body for _, body in answers}) == 1, answers


def test_batch_inside_a_replica_and_delete(driver: tuple[Steady, int]) -> None:
    @serve.deployment(max_ongoing_requests=50)
    class Batcher:
        @serve.batch(max_batch_size=5, batch_wait_timeout_s=1)
        async def sizes(self, items: list[int]) -> list[int]:
            return [len(items)] * len(items)

        async def __call__(self, item: int) -> int:
            return int(await self.sizes(item))

    handle = serve.run(Batcher.bind(), name="batch", route_prefix=None)
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        sizes = list(pool.map(lambda i: handle.remote(i).result(), range(10)))
    assert max(sizes) > 1, sizes
    serve.delete("batch")
    assert "batch" not in serve.status().applications


def test_a_rerun_after_delete_answers_the_old_and_new_handles(
    driver: tuple[Steady, int],
) -> None:
    """The same name run, deleted and run again: the re-made service's route tables
    count their versions from the start again, as the first run's did, so a handle
    that knew the first run's table must not take the second's for it."""

    @serve.deployment
    class Counter:
        def __init__(self) -> None:
            self.count = 0

        def __call__(self) -> int:
            self.count += 1
            return self.count

    first = serve.run(Counter.bind(), name="again", route_prefix=None)
    assert first.remote().result(timeout_s=30) == 1
    serve.delete("again")
    second = serve.run(Counter.bind(), name="again", route_prefix=None)
    assert second.remote().result(timeout_s=5) == 1  # a new replica, counting anew
    assert serve.get_app_handle("again").remote().result(timeout_s=5) == 2
    assert first.remote().result(timeout_s=5) == 3


def test_two_bindings_of_one_class_are_renamed_as_ray_does(driver: tuple[Steady, int]) -> None:
    """Ray names bound deployments depth first from the ingress, a repeated name
    taking ``_1``, ``_2``...; a blocking ``.result()`` inside an async method is
    refused with Ray's message."""

    @serve.deployment
    class Echo:
        def __init__(self, word: str) -> None:
            self.word = word

        def __call__(self) -> str:
            return self.word

    @serve.deployment
    class Both:
        def __init__(self, first: Any, second: Any) -> None:
            self.first, self.second = first, second

        async def __call__(self) -> list[str]:
            return [await self.first.remote(), await self.second.remote()]

        async def blocking(self) -> str:
            return str(self.first.remote().result())

    handle = serve.run(Both.bind(Echo.bind("a"), Echo.bind("b")), name="twins", route_prefix=None)
    assert handle.remote().result(timeout_s=30) == ["a", "b"]
    assert set(serve.status().applications["twins"].deployments) == {"Both", "Echo", "Echo_1"}
    with pytest.raises(
        Exception,
        match=re.escape(RAY_SYNC_REFUSAL),
    ):
        handle.blocking.remote().result(timeout_s=30)
    serve.delete("twins")


def _three_replicas(context: Any) -> tuple[int, dict[str, Any]]:
    """Ray's custom policy signature: a context in, (replicas, policy_state) out."""
    return 3, {"seen": context.current_num_replicas}


@pytest.mark.parametrize("form", ["object", "dict"])
def test_a_custom_policy_given_as_a_callable_scales_the_deployment(
    driver: tuple[Steady, int], form: str
) -> None:
    """Ray takes ``policy_function`` as a callable as well as an import path:
    ``AutoscalingConfig(policy=AutoscalingPolicy(policy_function=fn))`` or the
    same as dicts."""
    bounds = {"min_replicas": 1, "max_replicas": 3, "initial_replicas": 1, "upscale_delay_s": 0}
    config: Any = {**bounds, "policy": {"policy_function": _three_replicas}}
    if form == "object":
        from steadyserve.serve.config import AutoscalingConfig, AutoscalingPolicy

        policy = AutoscalingPolicy(policy_function=_three_replicas)
        config = AutoscalingConfig(**bounds, policy=policy)

    @serve.deployment(autoscaling_config=config)
    def pid() -> int:
        return os.getpid()

    handle = serve.run(pid.bind(), name="custom", route_prefix=None)
    deadline = time.monotonic() + 60
    seen: set[int] = set()
    while len(seen) < 3 and time.monotonic() < deadline:
        seen |= {handle.remote().result(timeout_s=30) for _ in range(10)}
        time.sleep(0.2)
    assert len(seen) == 3
    serve.delete("custom")


def test_two_ingresses_in_one_application_are_refused_as_ray_does(
    driver: tuple[Steady, int],
) -> None:
    from fastapi import FastAPI

    from steadyserve.serve.exceptions import RayServeException

    @serve.deployment
    @serve.ingress(FastAPI())
    class Inner:
        pass

    @serve.deployment
    @serve.ingress(FastAPI())
    class Outer:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

    with pytest.raises(RayServeException) as refused:
        serve.run(Outer.bind(Inner.bind()), name="two-ingresses", route_prefix=None)
    assert str(refused.value) == (
        'Found multiple FastAPI deployments in application "two-ingresses". '
        "Please only include one deployment with @serve.ingress "
        "in your application to avoid this issue."
    )
    assert "two-ingresses" not in serve.status().applications


def test_an_ingress_app_with_an_included_router_is_shipped(driver: tuple[Steady, int]) -> None:
    """FastAPI 0.137 and later keep a threading lock in each included router, which
    no pickle takes; Ray 2.60 ships such an app with fresh locks, as this does."""
    from fastapi import APIRouter, FastAPI

    app = FastAPI()
    router = APIRouter()

    @router.get("/hello")
    def hello() -> str:
        return "hello from the router"

    app.include_router(router, prefix="/r")

    @serve.deployment
    @serve.ingress(app)
    class Api:
        @app.get("/own")
        def own(self) -> str:
            return type(self).__name__

    _, port = driver
    serve.run(Api.bind(), name="routed", route_prefix="/routed")
    assert get("127.0.0.1", port, "/routed/r/hello") == (200, '"hello from the router"')
    assert get("127.0.0.1", port, "/routed/own") == (200, '"Api"')
    serve.delete("routed")


def test_rays_ingress_without_a_class_and_with_a_builder(driver: tuple[Steady, int]) -> None:
    """Ray 2.60's ``serve.deployment(serve.ingress(app)())``: no class of the user's;
    and ``serve.ingress(builder)``: a function that makes the ASGI app on the
    replica (here a Starlette one)."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/hi")
    def hi() -> str:
        return "standalone"

    def build() -> Any:
        from starlette.applications import Starlette
        from starlette.responses import PlainTextResponse
        from starlette.routing import Route

        async def hello(request: Any) -> PlainTextResponse:
            return PlainTextResponse("built on the replica")

        return Starlette(routes=[Route("/hello", hello)])

    _, port = driver
    serve.run(serve.deployment(serve.ingress(app)()).bind(), name="bare", route_prefix="/bare")
    assert get("127.0.0.1", port, "/bare/hi") == (200, '"standalone"')
    serve.delete("bare")
    serve.run(serve.deployment(serve.ingress(build)()).bind(), name="built", route_prefix="/built")
    assert get("127.0.0.1", port, "/built/hello") == (200, "built on the replica")
    serve.delete("built")


def test_rays_late_bound_ingress_builds_its_app_from_the_instance(
    driver: tuple[Steady, int],
) -> None:
    """Ray 2.60's ``serve.ingress()`` with no app: the class's
    ``__serve_build_asgi_app__`` makes it after the constructor."""

    @serve.deployment
    @serve.ingress()
    class Late:
        def __init__(self, word: str) -> None:
            self.word = word

        def __serve_build_asgi_app__(self) -> Any:
            from fastapi import FastAPI

            app = FastAPI()

            @app.get("/word")
            def word() -> str:
                return self.word

            return app

    _, port = driver
    serve.run(Late.bind("late-bound"), name="late", route_prefix="/late")
    assert get("127.0.0.1", port, "/late/word") == (200, '"late-bound"')
    serve.delete("late")


def test_a_busy_gateway_port_names_who_chose_it_and_who_holds_it(
    driver: tuple[Steady, int],
) -> None:
    """serve.start binds the port as Ray's starts its proxy: a busy one is refused
    there, and later runs keep the port the gateway has."""
    from steadyserve.serve import api

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        with pytest.raises(RuntimeError) as refused:
            serve.start(http_options={"port": busy})
        assert api._http_port is None  # a refused start names no port for later runs
        serve.run(serve.deployment(lambda: "x").bind(), name="busy", route_prefix=None)
    message = str(refused.value)
    assert f"gateway port {busy} is already in use by pid {os.getpid()} (" in message
    # The holder's command line, as /proc has it (pytest's own, or an xdist worker's).
    command = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert f"pid {os.getpid()} ({command}" in message
    assert f'serve.start(http_options={{"port": {busy}}})' in message
    serve.delete("busy")


def test_an_applications_docs_path_is_known_once_serve_run_returns(
    driver: tuple[Steady, int],
) -> None:
    """Ray's docs path of an application (its controller's ``get_docs_path``): the
    ingress FastAPI app's ``docs_url``, a builder's once the replica made it; None
    for a Starlette app and for an application without an ingress app."""
    from fastapi import FastAPI
    from starlette.applications import Starlette

    from steadyserve.serve.app_ingress import docs_path

    def build() -> Any:
        return FastAPI(docs_url="/built-docs")

    class Plain:
        def __call__(self) -> str:
            return "plain"

    runs = {
        "docs-app": (serve.ingress(FastAPI(docs_url="/custom-docs"))(), "/custom-docs"),
        "docs-builder": (serve.ingress(build)(), "/built-docs"),
        "docs-default": (serve.ingress(FastAPI())(), "/docs"),
        "docs-starlette": (serve.ingress(Starlette())(), None),
        "docs-none": (Plain, None),
    }
    for name, (cls, expected) in runs.items():
        serve.run(serve.deployment(cls).bind(), name=name, route_prefix=f"/{name}")
        assert docs_path(name) == expected, name
        serve.delete(name)
    assert docs_path("no-such-app") is None
