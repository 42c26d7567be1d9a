# Ported from ray-project/ray (Apache-2.0), python/ray/serve/tests/test_handle_api.py
# at commit 0f56e116a2f452aa0d799968e48349846c0bdfcb. Every test function, in
# Ray's order, its inputs, calls and expected values as written; changed: the
# imports (``from steadyserve import serve``; Ray's test helpers from
# _ray_helpers.py) and the runtime fixture (conftest.py: one SteadyServe
# controller for the file, serve.shutdown() between tests).
#
# Skipped, each with its reason:
# - test_convert_to_object_ref, test_convert_to_object_ref_gen: they turn a
#   response into a Ray ObjectRef and run a @ray.remote task on it (Ray core;
#   SteadyServe provides ray.serve only). Counted as failures.
# - test_max_ongoing_requests_enforced: skipped in Ray too unless
#   RAY_SERVE_ENABLE_STRICT_MAX_ONGOING_REQUESTS is set (its default is off),
#   and its body drives a @ray.remote actor. Counted as a failure.
# ruff: noqa
# mypy: ignore-errors
import asyncio
import os
import sys
from typing import Any, List

import pytest

from steadyserve import serve
from steadyserve.serve.exceptions import RayServeException
from steadyserve.serve.handle import (
    DeploymentHandle,
    DeploymentResponse,
    DeploymentResponseGenerator,
)
from tests.compat.ray_serve.peer._ray_helpers import SignalActor, ray

# Ray's constant: strict enforcement is off unless its environment variable is set.
RAY_SERVE_ENABLE_STRICT_MAX_ONGOING_REQUESTS = (
    os.environ.get("RAY_SERVE_ENABLE_STRICT_MAX_ONGOING_REQUESTS", "0") == "1"
)

LOCAL_TESTING_MODE = os.environ.get("LOCAL_TESTING_MODE", "0") == "1"


def test_basic(serve_instance):
    @serve.deployment
    def downstream():
        return "hello"

    @serve.deployment
    class Deployment:
        def __init__(self, handle: DeploymentHandle):
            self._handle = handle
            assert isinstance(self._handle, DeploymentHandle)

        async def __call__(self):
            response = self._handle.remote()
            assert isinstance(response, DeploymentResponse)
            val = await response

            # Check that the response can be awaited multiple times.
            for _ in range(10):
                assert (await response) == val

            return val

    handle: DeploymentHandle = serve.run(
        Deployment.bind(downstream.bind()), _local_testing_mode=LOCAL_TESTING_MODE
    )
    assert isinstance(handle, DeploymentHandle)
    r = handle.remote()
    assert r.result() == "hello"

    # Check that `.result()` can be called multiple times.
    for _ in range(10):
        assert r.result() == "hello"


def test_result_timeout(serve_instance):
    """Test `.result()` timeout parameter."""
    signal_actor = SignalActor.remote()

    @serve.deployment
    class Deployment:
        async def __call__(self):
            await signal_actor.wait.remote()
            return "hi"

    handle = serve.run(Deployment.bind(), _local_testing_mode=LOCAL_TESTING_MODE)
    ref = handle.remote()
    with pytest.raises(TimeoutError):
        ref.result(timeout_s=0.1)

    ray.get(signal_actor.send.remote())
    assert ref.result() == "hi"


def test_get_app_and_deployment_handle(serve_instance):
    """Test the `get_app_handle` and `get_deployment_handle` APIs."""

    if LOCAL_TESTING_MODE:
        pytest.skip("local_testing_mode doesn't support getting dynamic handles.")

    @serve.deployment
    def downstream():
        return "hello"

    @serve.deployment
    class Deployment:
        def __init__(self, handle: DeploymentHandle):
            pass

        async def check_get_deployment_handle(self):
            handle = serve.get_deployment_handle(deployment_name="downstream")
            assert isinstance(handle, DeploymentHandle)

            ref = handle.remote()
            assert isinstance(ref, DeploymentResponse)
            return await ref

    serve.run(Deployment.bind(downstream.bind()))
    handle = serve.get_app_handle("default")
    assert isinstance(handle, DeploymentHandle)
    assert handle.check_get_deployment_handle.remote().result() == "hello"

    handle = serve.get_deployment_handle("downstream", app_name="default")
    assert isinstance(handle, DeploymentHandle)
    assert handle.remote().result() == "hello"


@pytest.mark.parametrize("arg_type", ["args", "kwargs"])
def test_compose_deployments_in_app(serve_instance, arg_type: str):
    """Test composing deployment handle refs within a deployment."""

    @serve.deployment
    class Downstream:
        def __init__(self, msg: str):
            self._msg = msg

        def __call__(self, inp: str):
            return f"{self._msg}|{inp}"

    @serve.deployment
    class Deployment:
        def __init__(self, handle1: DeploymentHandle, handle2: DeploymentHandle):
            self._handle1 = handle1
            self._handle2 = handle2

        async def __call__(self):
            if arg_type == "args":
                result = await self._handle1.remote(self._handle2.remote("hi"))
            else:
                result = await self._handle1.remote(inp=self._handle2.remote(inp="hi"))
            return f"driver|{result}"

    handle = serve.run(
        Deployment.bind(
            Downstream.options(name="downstream1").bind("downstream1"),
            Downstream.options(name="downstream2").bind("downstream2"),
        ),
        _local_testing_mode=LOCAL_TESTING_MODE,
    )
    assert handle.remote().result() == "driver|downstream1|downstream2|hi"


@pytest.mark.parametrize("arg_type", ["args", "kwargs"])
def test_compose_apps(serve_instance, arg_type):
    """Test composing deployment handle refs outside of a deployment."""

    if LOCAL_TESTING_MODE:
        pytest.skip("local_testing_mode only supports single apps.")

    @serve.deployment
    class Deployment:
        def __init__(self, msg: str):
            self._msg = msg

        def __call__(self, inp: str):
            return f"{self._msg}|{inp}"

    handle1 = serve.run(Deployment.bind("app1"), name="app1", route_prefix="/app1")
    handle2 = serve.run(Deployment.bind("app2"), name="app2", route_prefix="/app2")

    if arg_type == "args":
        assert handle1.remote(handle2.remote("hi")).result() == "app1|app2|hi"
    else:
        assert handle1.remote(inp=handle2.remote(inp="hi")).result() == "app1|app2|hi"


def test_compose_args_and_kwargs(serve_instance):
    """Test composing deployment handle refs outside of a deployment."""

    @serve.deployment
    class Downstream:
        def __init__(self, msg: str):
            self._msg = msg

        def __call__(self, *args, **kwargs):
            return {"args": args, "kwargs": kwargs}

    @serve.deployment
    class Deployment:
        def __init__(self, handle1: DeploymentHandle, handle2: DeploymentHandle):
            self._handle1 = handle1
            self._handle2 = handle2

        async def __call__(self):
            return await self._handle1.remote(
                "0",
                "100",
                self._handle2.remote("1", "2", a="a", b="b"),
                x="x",
                y=self._handle2.remote("3", "4", c="c", d="d"),
                z="z",
            )

    handle = serve.run(
        Deployment.bind(
            Downstream.bind("downstream1"),
            Downstream.bind("downstream2"),
        ),
        _local_testing_mode=LOCAL_TESTING_MODE,
    )

    result = handle.remote().result()
    assert result["args"] == (
        "0",
        "100",
        {
            "args": ("1", "2"),
            "kwargs": {"a": "a", "b": "b"},
        },
    )
    assert result["kwargs"] == {
        "x": "x",
        "y": {
            "args": ("3", "4"),
            "kwargs": {"c": "c", "d": "d"},
        },
        "z": "z",
    }


def test_nested_deployment_response_error(serve_instance):
    """Test that passing a deployment response in a nested object to a downstream
    handle call errors, and with an informative error message."""

    @serve.deployment
    class Downstream:
        def __call__(self, *args):
            pass

    @serve.deployment
    class Upstream:
        def __init__(self, h1: DeploymentHandle, h2: DeploymentHandle):
            self._h1 = h1
            self._h2 = h2

        async def __call__(self):
            with pytest.raises(
                RayServeException, match="`DeploymentResponse` is not serializable"
            ):
                await self._h2.remote([self._h2.remote()])

    h = serve.run(
        Upstream.bind(Downstream.bind(), Downstream.bind()),
        _local_testing_mode=LOCAL_TESTING_MODE,
    )
    h.remote().result()


@pytest.mark.skip(reason="Ray core: a @ray.remote task takes the response's ObjectRef")
def test_convert_to_object_ref(serve_instance):
    """Test converting deployment handle refs to Ray object refs."""


def test_generators(serve_instance):
    """Test generators inside and outside a deployment."""

    @serve.deployment
    def downstream():
        for i in range(10):
            yield i

    @serve.deployment
    class Deployment:
        def __init__(self, handle: DeploymentHandle):
            self._handle = handle.options(stream=True)

        async def __call__(self):
            gen = self._handle.remote()
            assert isinstance(gen, DeploymentResponseGenerator)
            async for i in gen:
                yield i

    handle = serve.run(
        Deployment.bind(downstream.bind()), _local_testing_mode=LOCAL_TESTING_MODE
    )

    gen = handle.options(stream=True).remote()
    assert isinstance(gen, DeploymentResponseGenerator)
    assert list(gen) == list(range(10))


@pytest.mark.skip(reason="Ray core: ObjectRef generators and ray.get of their refs")
def test_convert_to_object_ref_gen(serve_instance):
    """Test converting generators to obj ref gens inside and outside a deployment."""


@pytest.mark.parametrize("stream", [False, True])
def test_sync_response_methods_fail_in_deployment(serve_instance, stream: bool):
    """Blocking `DeploymentResponse` (and generator) methods should fail in loop."""

    if stream:

        @serve.deployment
        def downstream():
            yield

    else:

        @serve.deployment
        def downstream():
            pass

    @serve.deployment
    class Deployment:
        def __init__(self, handle: DeploymentHandle):
            self._handle = handle.options(stream=stream)

        async def __call__(self):
            response = self._handle.remote()
            with pytest.raises(
                RuntimeError,
                match="should not be called from within an `asyncio` event loop",
            ):
                if stream:
                    for _ in response:
                        pass
                else:
                    response.result()

            return "OK"

    handle = serve.run(
        Deployment.bind(downstream.bind()), _local_testing_mode=LOCAL_TESTING_MODE
    )

    assert handle.remote().result() == "OK"


def test_handle_eager_execution(serve_instance):
    """Handle requests should be sent without fetching the result."""

    upstream_signal_actor = SignalActor.remote()
    downstream_signal_actor = SignalActor.remote()

    @serve.deployment
    async def downstream():
        await downstream_signal_actor.send.remote()

    @serve.deployment
    class Deployment:
        def __init__(self, handle: DeploymentHandle):
            self._handle = handle

        async def __call__(self):
            # Send a request without awaiting the response. It should still
            # executed (verified via signal actor).
            r = self._handle.remote()
            await upstream_signal_actor.send.remote()

            await downstream_signal_actor.wait.remote()

            return await r

    handle = serve.run(
        Deployment.bind(downstream.bind()), _local_testing_mode=LOCAL_TESTING_MODE
    )

    # Send a request without awaiting the response. It should still
    # executed (verified via signal actor).
    r = handle.remote()
    ray.get(upstream_signal_actor.wait.remote(), timeout=5)

    r.result() == "OK"


@pytest.mark.skipif(
    not RAY_SERVE_ENABLE_STRICT_MAX_ONGOING_REQUESTS,
    reason="Strict enforcement must be enabled.",
)
@pytest.mark.skip(reason="Ray core: its body drives a @ray.remote Waiter actor")
def test_max_ongoing_requests_enforced(serve_instance):
    """Handles should respect max_ongoing_requests enforcement."""


if __name__ == "__main__":
    sys.exit(pytest.main(["-v", "-s", __file__]))
