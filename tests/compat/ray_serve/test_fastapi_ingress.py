"""The Ray docs' FastAPI example in a real runner: class-based routes get the
replica's instance as ``self``; the gateway's root path is the app's
``root_path`` (routes, docs pages under the prefix); ``from ray import serve``
unchanged."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from tests.replica._proc import HOST, Replica

APPS = Path(__file__).parent / "apps"


def get(
    port: int, path: str, root: str | None, method: str = "GET", body: object = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    headers = {"x-steady-root-path": root} if root else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_ray_docs_fastapi_example_under_a_prefix(tmp_path: Path) -> None:
    with Replica(APPS, "fastapi_app:fastapi_app", log_dir=tmp_path) as replica:
        replica.wait_health(200, timeout=60)
        port = replica.port
        for root, prefix in ((None, ""), ("/api", "/api")):  # own endpoint, then gateway
            assert get(port, f"{prefix}/", root) == (200, b'"Hello, world!"')
            status, body = get(port, f"{prefix}/items/7?q=x", root)
            assert status == 200 and json.loads(body) == {
                "item_id": 7,
                "q": "x",
                "greeting": "Hello",
            }
            status, body = get(port, f"{prefix}/items/seven", root)
            assert status == 422  # FastAPI's own validation of the path parameter
            status, body = get(port, f"{prefix}/items", root, "POST", {"name": "pen", "price": 2.5})
            assert status == 200 and json.loads(body) == {"created": "pen", "price_with_tax": 3.0}
            assert get(port, f"{prefix}/stream", root) == (200, b"0\n1\n2\n3\n4\n")
            assert get(port, f"{prefix}/outside", root)[0] == 200
        status, body = get(port, "/api/docs", "/api")
        assert status == 200 and b"/api/openapi.json" in body  # the docs page links under it
        status, body = get(port, "/api/openapi.json", "/api")
        paths = json.loads(body)["paths"]
        assert status == 200 and set(paths) == {
            "/",
            "/items/{item_id}",
            "/items",
            "/stream",
            "/outside",
        }
        assert "self" not in json.dumps(paths["/"])  # self is the instance, not a parameter
    notices = [line for line in replica.stderr.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1 and "is SteadyServe's API here" in notices[0]
