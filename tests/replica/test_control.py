"""The control app in-process: healthz phases and check_health, reconfigure, info."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from steadyserve.replica.control import Phase, ReplicaState, control_app
from steadyserve.replica.loader import Target
from steadyserve.replica.user import UserClass
from steadyserve.wire import replica_contract as contract
from tests.replica._asgi import Reply, call


class Model:
    def __init__(self) -> None:
        self.config: Any = None
        self.health_calls = 0
        self.health_error: Exception | None = None
        self.health_gate = threading.Event()
        self.health_gate.set()

    def reconfigure(self, config: Any) -> None:
        if config.get("bad"):
            raise ValueError("bad\nconfig")
        self.config = config

    def check_health(self) -> None:
        self.health_calls += 1
        self.health_gate.wait(10)
        if self.health_error is not None:
            raise self.health_error

    def __call__(self, request: object) -> Any:
        return self.config


class AsyncModel:
    def __init__(self) -> None:
        self.config: Any = None

    async def reconfigure(self, config: Any) -> None:
        await asyncio.sleep(0)
        self.config = config

    async def check_health(self) -> None:
        await asyncio.sleep(30)

    async def __call__(self, request: object) -> Any:
        return self.config


class Bare:
    def __call__(self, request: object) -> Any:
        return "bare"


async def state_for(
    cls: type, *, ready: bool = True, timeout_s: float = 5.0
) -> tuple[ReplicaState, Any]:
    user = UserClass(cls, ThreadPoolExecutor(2))
    await user.construct()
    state = ReplicaState(Target("m:" + cls.__name__, "class", cls), timeout_s, user)
    if ready:
        state.phase = Phase.READY
    return state, control_app(state)


def test_healthz_follows_the_phases() -> None:
    async def scenario() -> list[Reply]:
        state, app = await state_for(Bare, ready=False)
        replies = [await call(app, path="/-/healthz")]
        state.phase = Phase.READY
        replies.append(await call(app, path="/-/healthz"))
        state.phase = Phase.DRAINING
        replies.append(await call(app, path="/-/healthz"))
        return replies

    initializing, ready, draining = asyncio.run(scenario())
    assert (initializing.status, initializing.json()) == (503, {"status": "initializing"})
    assert (ready.status, ready.json()) == (200, {"status": "ok"})
    assert (draining.status, draining.json()) == (503, {"status": "draining"})


def test_check_health_raising_is_unhealthy_in_one_line() -> None:
    async def scenario() -> tuple[Reply, Reply]:
        state, app = await state_for(Model)
        assert state.user is not None
        model = state.user.instance
        model.health_error = RuntimeError("GPU\nlost")
        sick = await call(app, path="/-/healthz")
        model.health_error = None
        return sick, await call(app, path="/-/healthz")

    sick, well = asyncio.run(scenario())
    assert (sick.status, sick.json()) == (
        503,
        {"status": "unhealthy", "error": "RuntimeError: GPU lost"},
    )
    assert well.status == 200


def test_a_hung_check_health_times_out_and_is_not_started_twice() -> None:
    async def scenario() -> None:
        state, app = await state_for(Model, timeout_s=0.05)
        assert state.user is not None
        model = state.user.instance
        model.health_gate.clear()
        for _ in range(3):
            reply = await call(app, path="/-/healthz")
            assert reply.status == 503
            assert reply.json() == {
                "status": "unhealthy",
                "error": "check_health did not return within 0.05s",
            }
        assert model.health_calls == 1
        model.health_gate.set()
        state.health_check_timeout_s = 5
        assert (await call(app, path="/-/healthz")).status == 200

    asyncio.run(scenario())


def test_an_async_check_health_times_out() -> None:
    async def scenario() -> Reply:
        _, app = await state_for(AsyncModel, timeout_s=0.05)
        return await call(app, path="/-/healthz")

    reply = asyncio.run(scenario())
    assert reply.status == 503
    assert reply.json()["error"] == "check_health did not return within 0.05s"


@pytest.mark.parametrize("cls", [Model, AsyncModel])
def test_reconfigure_applies_the_posted_config(cls: type) -> None:
    async def scenario() -> tuple[Reply, Any]:
        state, app = await state_for(cls)
        reply = await call(app, "POST", "/-/reconfigure", body=b'{"language": "german"}')
        assert state.user is not None
        return reply, state.user.instance.config

    reply, config = asyncio.run(scenario())
    assert (reply.status, reply.json()) == (200, {"status": "ok"})
    assert config == {"language": "german"}


def test_reconfigure_raising_is_500_and_keeps_the_old_config() -> None:
    async def scenario() -> tuple[Reply, Any]:
        state, app = await state_for(Model)
        await call(app, "POST", "/-/reconfigure", body=b'{"v": 1}')
        reply = await call(app, "POST", "/-/reconfigure", body=b'{"bad": true}')
        assert state.user is not None
        return reply, state.user.instance.config

    reply, config = asyncio.run(scenario())
    assert (reply.status, reply.json()) == (500, {"error": "ValueError: bad config"})
    assert config == {"v": 1}


def test_reconfigure_refusals() -> None:
    async def scenario() -> dict[str, Reply]:
        _, bare = await state_for(Bare)
        _, initializing = await state_for(Model, ready=False)
        _, model = await state_for(Model)
        asgi = control_app(ReplicaState(Target("m:app", "asgi", object()), 5.0))
        return {
            "no method": await call(bare, "POST", "/-/reconfigure", body=b"{}"),
            "asgi": await call(asgi, "POST", "/-/reconfigure", body=b"{}"),
            "initializing": await call(initializing, "POST", "/-/reconfigure", body=b"{}"),
            "not json": await call(model, "POST", "/-/reconfigure", body=b"{nope"),
            "get": await call(model, "GET", "/-/reconfigure"),
        }

    replies = asyncio.run(scenario())
    assert replies["no method"].status == 409
    assert replies["no method"].json() == {
        "error": "class Bare has no reconfigure(self, user_config) method"
    }
    assert replies["asgi"].status == 409
    assert replies["initializing"].status == 503
    assert replies["not json"].status == 400
    assert replies["not json"].json()["error"].startswith("body must be the user_config as JSON")
    assert replies["get"].status == 405


def test_asgi_apps_are_healthy_once_ready() -> None:
    async def scenario() -> Reply:
        state = ReplicaState(Target("m:app", "asgi", object()), 5.0, phase=Phase.READY)
        return await call(control_app(state), path="/-/healthz")

    assert asyncio.run(scenario()).status == 200


def test_info_describes_the_replica() -> None:
    async def scenario() -> Reply:
        state = ReplicaState(
            Target("m:Model", "deployment", Model, {"num_replicas": 2}), 5.0, phase=Phase.READY
        )
        return await call(control_app(state), path="/-/info")

    reply = asyncio.run(scenario())
    assert reply.json() == {
        "kind": "deployment",
        "options": {"num_replicas": 2},
        "import_path": "m:Model",
        "pid": os.getpid(),
        "status": "ready",
        "ongoing_requests": 0,
        "max_ongoing_requests": None,
        "docs_path": None,
    }


def test_info_gives_the_docs_path_of_a_fastapi_ingress() -> None:
    """Ray's docs path of the application: the ingress FastAPI app's ``docs_url``."""
    from fastapi import FastAPI

    async def scenario() -> Reply:
        app = FastAPI(docs_url="/custom-docs")
        target = Target("m:app", "deployment", Model, ingress=app)
        return await call(control_app(ReplicaState(target, 5.0)), path="/-/info")

    assert asyncio.run(scenario()).json()["docs_path"] == "/custom-docs"


def test_with_a_secret_every_control_request_must_carry_it() -> None:
    header = contract.CONTROL_SECRET_HEADER

    async def scenario() -> list[Reply]:
        state = ReplicaState(
            Target("m:app", "asgi", object()), 5.0, phase=Phase.READY, control_secret="s3cret"
        )
        app = control_app(state)
        return [
            await call(app, path="/-/healthz"),
            await call(app, path="/-/healthz", headers={header: "s3cre"}),
            await call(app, "POST", "/-/reconfigure", body=b"{}"),
            await call(app, path="/-/info"),
            await call(app, path="/-/healthz", headers={header: "s3cret"}),
        ]

    replies = asyncio.run(scenario())
    assert [r.status for r in replies] == [401, 401, 401, 401, 200]
    assert replies[0].json() == {"error": f"missing or wrong {header}"}
