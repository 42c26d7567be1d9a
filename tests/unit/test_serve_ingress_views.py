"""FastAPI class-based views as Ray Serve makes them (``serve.ingress``): a class's
route methods, its bases' too, get the replica's instance as ``self``; the routes
stay plain routes of the app, with their options; the class keeps the app as it
was when decorated, so one app shared by two classes serves each its own routes
and routes added later serve neither."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute, APIWebSocketRoute
from fastapi.testclient import TestClient
from pydantic import BaseModel

from steadyserve import serve
from steadyserve.serve import context
from steadyserve.serve.ingress import asgi_app, ingress_of, make_fastapi_class_based_view


@pytest.fixture
def instance(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The replica context's servable object, set by each test."""
    held: dict[str, Any] = {}
    monkeypatch.setattr(
        context, "get_replica_context", lambda: SimpleNamespace(servable_object=held["obj"])
    )
    yield held


def _client(cls: type, held: dict[str, Any]) -> TestClient:
    """What the replica of ``cls`` serves, with an instance of ``cls`` as ``self``."""
    held["obj"] = cls()
    return TestClient(asgi_app(cls))


def test_inherited_route_methods_get_the_instance_and_a_lookalike_class_does_not(
    instance: dict[str, Any],
) -> None:
    app = FastAPI()

    class Base:
        level = "base"

        @app.get("/base")
        def base(self: Any) -> str:
            return str(self.level)

    class Middle(Base):
        @app.get("/middle")
        def middle(self: Any) -> str:
            return "middle " + str(self.level)

    class MiddleExtra:  # its name starts as Middle's does: not a base of the class
        @app.get("/extra")
        def extra(self: Any) -> str:
            return "extra"

    @serve.ingress(app)
    class Served(Middle):
        level = "served"

    client = _client(Served, instance)
    assert client.get("/base").json() == "served"
    assert client.get("/middle").json() == "middle served"
    assert client.get("/extra").status_code == 422  # self is a query parameter there


def test_a_bound_route_stays_a_plain_route_of_the_app_with_its_options() -> None:
    app = FastAPI()

    class Item(BaseModel):
        name: str

    class A:
        @app.post("/items/{i}", response_model=Item, status_code=201, tags=["t"], name="make")
        def make(self: Any, i: int) -> Any:
            return {"name": str(i), "dropped": True}

        @app.websocket("/ws/{i}")
        async def ws(self: Any, websocket: Any, i: int) -> None: ...

    make_fastapi_class_based_view(app, A)
    http, socket = app.routes[-2:]
    assert isinstance(http, APIRoute) and http.endpoint is A.make
    options = (http.response_model, http.status_code, http.tags, http.name)
    assert options == (Item, 201, ["t"], "make")
    assert http.methods == {"POST"}
    assert [d.name for d in http.dependant.dependencies] == ["self"]
    assert [p.name for p in http.dependant.path_params] == ["i"]
    assert not http.dependant.query_params
    assert isinstance(socket, APIWebSocketRoute) and socket.endpoint is A.ws
    assert [d.name for d in socket.dependant.dependencies] == ["self"]
    assert list(inspect.signature(A.make).parameters) == ["self", "i"]


def test_one_app_shared_by_two_classes_serves_each_its_own_routes(
    instance: dict[str, Any],
) -> None:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @serve.ingress(app)
    class First:
        @app.get("/")
        def root(self: Any) -> str:
            return "first"

    @serve.ingress(app)
    class Second:
        @app.get("/")
        def root(self: Any) -> str:
            return "second"

        @app.get("/two")
        def two(self: Any) -> str:
            return "two"

    @app.get("/later")
    def later() -> str:
        return "later"

    first, second = _client(First, instance), _client(Second, instance)
    assert (first.get("/").json(), first.get("/two").status_code) == ("first", 404)
    assert (second.get("/").json(), second.get("/two").json()) == ("second", "two")
    assert first.get("/later").status_code == second.get("/later").status_code == 404
    assert ingress_of(First) is not app and ingress_of(Second) is not app


def test_a_redefined_method_keeps_both_routes_bound(instance: dict[str, Any]) -> None:
    app = FastAPI()

    @serve.ingress(app)
    class A:
        @app.get("/")
        def method(self: Any) -> str:
            return "get"

        @app.post("/")
        def method(self: Any) -> str:  # noqa: F811
            return "post"

    client = _client(A, instance)
    assert (client.get("/").json(), client.post("/").json()) == ("get", "post")


def test_an_app_with_an_included_router_is_copied_for_its_class(
    instance: dict[str, Any],
) -> None:
    """FastAPI 0.137 and later keep a lock in each included router: the class's
    copy of the app is made as serve.run ships it, a fresh lock in it."""
    app = FastAPI()
    router = APIRouter(prefix="/r")

    @router.get("/x")
    def x() -> str:
        return "x"

    app.include_router(router)

    @serve.ingress(app)
    class A:
        pass

    assert _client(A, instance).get("/r/x").json() == "x"
