"""A FastAPI ``@serve.ingress`` class defined inside a function (as Ray's tests and
notebooks write it), shipped by value as ``serve.run`` ships it, then loaded in a
fresh interpreter as a replica loads it: it unpickles (the app's Starlette
``State`` did not) and its class-based route gets the instance as ``self`` (the
rebuilt class has lost its ``__qualname__``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from steadyserve import serve
from steadyserve.serve import shipped

REPLICA_SIDE = """
import asyncio, types
from steadyserve.replica.loader import load
from steadyserve.serve import context

target = load("steadyserve.serve.shipped:app.Greeter")
instance = target.obj()
context.get_replica_context = lambda: types.SimpleNamespace(servable_object=instance)

async def get(path):
    sent = []
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": [], "root_path": "", "scheme": "http",
             "server": ("127.0.0.1", 1), "client": ("127.0.0.1", 2), "http_version": "1.1",
             "asgi": {"version": "3.0"}}
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message):
        sent.append(message)
    await target.ingress(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]).decode()

print(asyncio.run(get("/")))
"""


def _app() -> Any:
    from fastapi import FastAPI

    app = FastAPI()

    @serve.ingress(app)
    class Greeter:
        def __init__(self) -> None:
            self.greeting = "Hello, world!"

        @app.get("/")
        def root(self: Any) -> str:
            return str(self.greeting)

    return serve.deployment(Greeter).bind()  # called: mypy sees the Deployment


def test_a_shipped_fastapi_class_serves_its_routes_in_a_fresh_replica(tmp_path: Path) -> None:
    shipped.write(_app(), tmp_path, {})
    done = subprocess.run(
        [sys.executable, "-c", REPLICA_SIDE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(200, '\"Hello, world!\"')"
