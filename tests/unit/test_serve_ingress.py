"""``@serve.ingress(app)``: a real replica serves the ASGI app, and the class behind
it still takes handle calls, only with the home's graph secret."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.replica._proc import HOST, Replica

from steadyserve.replica.loader import load
from steadyserve.serve import wire
from steadyserve.serve.errors import LoadError

MODULE = """
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from steadyserve import serve

async def hello(request):
    return PlainTextResponse("hello from the ingress app")

web = Starlette(routes=[Route("/hello", hello)])

@serve.deployment
@serve.ingress(web)
class Api:
    def double(self, value):
        return value * 2

app = Api.bind()
"""


def _call(port: int, method: str, value: object, secret: str | None) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    headers = {wire.METHOD_HEADER: method, "Content-Type": wire.CONTENT_TYPE}
    if secret is not None:
        headers[wire.GRAPH_SECRET_HEADER] = secret
    body = wire.encode({"args": [value], "kwargs": {}}, allow_pickle=secret is not None)
    conn.request("POST", wire.CALL_PATH, body=body, headers=headers)
    response = conn.getresponse()
    try:
        return response.status, response.read()
    finally:
        conn.close()


def test_ingress_app_answers_http_and_methods_answer_handles(tmp_path: Path) -> None:
    (tmp_path / "ingress_mod.py").write_text(MODULE)
    env = {"STEADY_GRAPH_SECRET": "s3cret"}
    with Replica(tmp_path, "ingress_mod:app", env, log_dir=tmp_path) as replica:
        replica.wait_health(200)
        assert replica.app("/hello") == (200, b"hello from the ingress app")
        status, body = _call(replica.port, "double", 21, "s3cret")
        assert status == 200 and wire.decode_one(body, allow_pickle=False) == 42
        status, body = _call(replica.port, "double", (1, 2), "s3cret")  # a tuple: pickle
        assert status == 200 and wire.decode_one(body, allow_pickle=True) == (1, 2, 1, 2)
        # Any local user reaches the app port: a call without the home's secret, JSON
        # or pickle, is refused before it runs.
        for secret in (None, "wrong"):
            status, body = _call(replica.port, "double", 21, secret)
            assert status == 403 and b"graph secret" in body
        for method in ("_private", "reconfigure", "check_health"):
            status, body = _call(replica.port, method, 1, "s3cret")
            assert status == 404 and json.loads(body[5:])["type"] == "_Refused"


def test_class_based_routes_are_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cbv_mod.py").write_text(
        "from starlette.applications import Starlette\n"
        "from starlette.routing import Route\n"
        "from steadyserve import serve\n"
        "web = Starlette()\n"
        "class Api:\n"
        "    def root(self, request):\n"
        "        return 'x'\n"
        "web.router.routes.append(Route('/', Api.root))\n"
        "app = serve.deployment(serve.ingress(web)(Api)).bind()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(LoadError, match=r"route '/' is the method Api.root: class-based"):
            load("cbv_mod:app")
    finally:
        sys.modules.pop("cbv_mod", None)


def test_ingress_refuses_what_ray_refuses_in_rays_words() -> None:
    """Ray 2.60's serve.ingress: a class only, and one without ``__call__``."""
    from fastapi import FastAPI

    from steadyserve import serve

    app = FastAPI()

    class Callable:
        def __call__(self) -> None: ...

    with pytest.raises(
        ValueError, match=r"^Classes passed to @serve.ingress may not have __call__ method\.$"
    ):
        serve.ingress(app)(Callable)
    with pytest.raises(ValueError, match=r"^@serve.ingress must be used with a class\.$"):
        serve.ingress(app)(lambda: None)


def test_ingress_with_no_app_needs_rays_builder_method() -> None:
    from steadyserve import serve

    class Plain:
        pass

    with pytest.raises(
        ValueError,
        match=r"^serve.ingress\(\) called without an app argument requires Plain to define"
        r" `__serve_build_asgi_app__`\.$",
    ):
        serve.ingress()(Plain)
