# Ported from ray-project/ray (Apache-2.0), python/ray/serve/tests/test_http_routes.py
# at commit 01474ffa0003761ee260c74bc4737d34991e1b31. Every test function, in
# Ray's order, its inputs, calls and expected values as written; changed: the
# imports (``from steadyserve import serve``; Ray's test helpers from
# _ray_helpers.py), the runtime fixture (conftest.py: one SteadyServe controller
# for the file, every application deleted between tests, as Ray's fixture does)
# and Ray's ``localhost:8000``, now ``base_url()``, the gateway port the fixture set.
#
# One expected value changed: test_path_prefixing_1's last check reads
# ``text="hi"`` at this commit, for a FastAPI route that returns the str "hi",
# which FastAPI (under Ray too) encodes as JSON, ``"hi"`` with its quotes; the
# file's earlier versions compared with '"hi"', as here.
#
# Changed in one case, said where: test_default_error_handling's second half
# kills the replica's Ray actor from inside the request (``ray.kill`` of
# ``ray.get_runtime_context().current_actor``); here the replica's process kills
# itself (SIGKILL), which is what that does to a Ray replica.
# ruff: noqa
# mypy: ignore-errors
import os
import signal
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.responses import RedirectResponse

from steadyserve import serve
from tests.compat.ray_serve.peer._ray_helpers import (
    SERVE_DEFAULT_APP_NAME,
    base_url,
    get_application_url,
)


def test_path_validation(serve_instance):
    @serve.deployment
    class D:
        pass

    # Path prefix must start with /.
    with pytest.raises(ValueError):
        serve.run(D.bind(), route_prefix="hello")

    # Path prefix must not end with / unless it's the root.
    with pytest.raises(ValueError):
        serve.run(D.bind(), route_prefix="/hello/")

    # Wildcards not allowed with new ingress support.
    with pytest.raises(ValueError):
        serve.run(D.bind(), route_prefix="/{hello}")


def test_routes_healthz(serve_instance):
    # Should return 503 until there are any routes populated.
    resp = httpx.get(f"{base_url()}/-/healthz")
    assert resp.status_code == 503
    assert resp.text == "Route table is not populated yet."

    @serve.deployment
    class D1:
        def __call__(self, *args):
            return "hi"

    # D1 not exposed over HTTP so should still return 503.
    serve.run(D1.bind(), route_prefix=None)
    resp = httpx.get(f"{base_url()}/-/healthz")
    assert resp.status_code == 503
    assert resp.text == "Route table is not populated yet."

    # D1 exposed over HTTP, should return 200 OK.
    serve.run(D1.bind(), route_prefix="/")
    resp = httpx.get(f"{base_url()}/-/healthz")
    assert resp.status_code == 200
    assert resp.text == "success"


def test_routes_endpoint(serve_instance):
    @serve.deployment
    class D1:
        def __call__(self, *args):
            return "D1"

    @serve.deployment
    class D2:
        def __call__(self, *args):
            return "D2"

    serve.run(D1.bind(), name="app1", route_prefix="/D1")
    serve.run(D2.bind(), name="app2", route_prefix="/hello/world")

    routes = httpx.get(f"{base_url()}/-/routes").json()
    assert len(routes) == 2, routes

    app1_url = get_application_url(app_name="app1")
    app2_url = get_application_url(app_name="app2")

    assert httpx.get(app1_url).text == "D1"
    assert httpx.get(app1_url).status_code == 200
    assert httpx.get(app2_url).text == "D2"
    assert httpx.get(app2_url).status_code == 200
    assert httpx.get(f"{base_url()}/not_exist").status_code == 404

    app1_url = get_application_url(app_name="app1", exclude_route_prefix=True)
    app2_url = get_application_url(app_name="app2", exclude_route_prefix=True)

    assert httpx.get(f"{app1_url}/").status_code == 404
    assert httpx.get(f"{app2_url}/").status_code == 404


def test_deployment_without_route(serve_instance):
    @serve.deployment
    class D:
        def __call__(self, *args):
            return "1"

    serve.run(D.bind(), route_prefix=None)
    routes = httpx.get(f"{base_url()}/-/routes")
    assert len(routes.json()) == 0

    # make sure the deployment is not exposed under the default route
    r = httpx.get(f"{base_url()}/")
    assert r.status_code == 404


def test_deployment_options_default_route(serve_instance):
    @serve.deployment
    class D1:
        pass

    serve.run(D1.bind())
    url = get_application_url(exclude_route_prefix=True)
    routes = httpx.get(f"{url}/-/routes").json()
    assert len(routes) == 1
    assert "/" in routes, routes
    assert routes["/"] == SERVE_DEFAULT_APP_NAME


def test_path_prefixing_1(serve_instance):
    def check_req(subpath, app_name, text=None, status=None):
        url = get_application_url(app_name=app_name, exclude_route_prefix=True)
        r = httpx.get(f"{url}{subpath}")
        if text is not None:
            assert r.text == text, f"{r.text} != {text}"
        if status is not None:
            assert r.status_code == status, f"{r.status_code} != {status}"

        return r

    @serve.deployment
    class D1:
        def __call__(self, *args):
            return "1"

    serve.run(D1.bind(), route_prefix="/hello", name="app1")
    check_req("/", "app1", status=404)
    check_req("/hello", "app1", text="1")
    check_req("/hello/", "app1", text="1")
    check_req("/hello/a", "app1", text="1")

    @serve.deployment
    class D2:
        def __call__(self, *args):
            return "2"

    serve.run(D2.bind(), route_prefix="/", name="app2")
    check_req("/hello/", "app1", text="1")
    check_req("/hello/a", "app1", text="1")
    check_req("/", "app2", text="2")
    check_req("/a", "app2", text="2")

    @serve.deployment
    class D3:
        def __call__(self, *args):
            return "3"

    serve.run(D3.bind(), route_prefix="/hello/world", name="app3")
    check_req("/hello/", "app1", text="1")
    check_req("/", "app2", text="2")
    check_req("/hello/world/", "app3", text="3")

    app = FastAPI()

    @serve.deployment
    @serve.ingress(app)
    class D4:
        @app.get("/")
        def root(self):
            return 4

        @app.get("/{p}")
        def subpath(self, p: str):
            return p

    serve.run(D4.bind(), route_prefix="/hello/world/again", name="app4")
    check_req("/hello/", "app4", text="1")
    check_req("/", "app4", text="2")
    check_req("/hello/world/", "app4", text="3")
    check_req("/hello/world/again/", "app4", text="4")
    check_req("/hello/world/again/hi", "app4", text='"hi"')


@pytest.mark.parametrize("base_path", ["", "subpath"])
def test_redirect(serve_instance, base_path):
    app = FastAPI()

    route_prefix = f"/{base_path}"

    @serve.deployment()
    @serve.ingress(app)
    class D:
        @app.get("/")
        def root(self):
            return "hello from /"

        @app.get("/redirect")
        def redirect_root(self, request: Request):
            root_path = request.scope.get("root_path")
            if not root_path.endswith("/"):
                root_path += "/"
            return RedirectResponse(url=root_path)

        @app.get("/redirect2")
        def redirect_twice(self, request: Request):
            root_path = request.scope.get("root_path")
            if root_path.endswith("/"):
                root_path = root_path[:-1]
            return RedirectResponse(url=root_path + app.url_path_for("redirect_root"))

    serve.run(D.bind(), route_prefix=route_prefix)

    if route_prefix != "/":
        route_prefix += "/"

    url = get_application_url(exclude_route_prefix=True)
    r = httpx.get(f"{url}{route_prefix}redirect", follow_redirects=True)
    assert r.status_code == 200
    assert len(r.history) == 1
    assert r.json() == "hello from /"

    r = httpx.get(f"{url}{route_prefix}redirect2", follow_redirects=True)
    assert r.status_code == 200
    assert len(r.history) == 2
    assert r.json() == "hello from /"


def test_default_error_handling(serve_instance):
    @serve.deployment
    def f():
        _ = 1 / 0

    serve.run(f.bind())
    url = get_application_url(exclude_route_prefix=True)
    # Error is raised when the request reaches the deployed replica.
    r = httpx.get(f"{url}/f")
    assert r.status_code == 500
    assert r.text == "Internal Server Error"

    @serve.deployment
    def h():
        os.kill(os.getpid(), signal.SIGKILL)  # Ray: ray.kill of the replica's own actor
        time.sleep(100)  # Don't return here to leave time for actor exit.

    serve.run(h.bind())
    # Error is raised before the request reaches the deployed replica as the replica does not exist.
    r = httpx.get(f"{base_url()}/h")
    assert r.status_code == 500
