"""Ray Serve applications as their authors wrote them, under ``steady deploy`` of a
Ray-format ``serve_config.yaml``: the Ray docs' text_ml (``from ray import serve``,
``user_config`` + ``reconfigure()``, a handle call) with ``language: german`` in
place on the same processes; and the FastAPI docs' class routes under ``/api``
with a ``runtime_env.pip`` package the controller does not have, in the
version's own sealed environment (no Ray there: ``ray`` is a stand-in)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.steady import Steady, http_get
from tests.helpers.wheels import make_wheel
from tests.lb._lb_helpers import free_port

APPS = Path(__file__).parent / "apps"

TEXT_ML = """\
proxy_location: EveryNode
http_options:
  host: 0.0.0.0
  port: {port}
applications:
- name: default
  route_prefix: /
  import_path: text_ml:app
  runtime_env:
    working_dir: {apps}/ray_text_ml
  deployments:
  - name: Translator
    num_replicas: 1
    user_config:
      language: french
    health_check_period_s: 0.2
  - name: Summarizer
    num_replicas: 1
    health_check_period_s: 0.2
"""

FASTAPI = """\
http_options:
  port: {port}
applications:
- name: web
  route_prefix: /api
  import_path: main:fastapi_app
  runtime_env:
    working_dir: {apps}/ray_fastapi
    pip: [fastapi, steadywheel==3.1]
    env_vars:
      UV_FIND_LINKS: {wheels}
      PIP_FIND_LINKS: {wheels}
  deployments:
  - name: MyFastAPIDeployment
    health_check_period_s: 0.2
"""


def post(port: int, path: str, body: object) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_ray_docs_text_ml_unchanged_then_german_in_place(
    steady: Steady, tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "serve_config.yaml"
    config.write_text(TEXT_ML.format(port=port, apps=APPS))
    out = steady.run("deploy", str(config), "--wait", "--timeout", "90")
    assert "`from ray import serve` is SteadyServe's API here" in out.stderr
    status, body = post(port, "/", "Hello my friend. And more.")
    assert status == 200, body
    first = json.loads(body)
    assert first["translation"] == "[french] Hello my friend"

    config.write_text(config.read_text().replace("language: french", "language: german"))
    out = steady.run("deploy", str(config), "--wait", "--timeout", "60")
    assert "in place" in out.stdout
    status, body = post(port, "/", "Hello my friend. And more.")
    again = json.loads(body)
    assert status == 200 and again["translation"] == "[german] Hello my friend"
    assert again["translator_pid"] == first["translator_pid"]  # the same processes
    assert again["summarizer_pid"] == first["summarizer_pid"]


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import fastapi"], capture_output=True).returncode,
    reason="needs fastapi in the test environment (the test extra)",
)
def test_fastapi_class_routes_under_a_prefix_in_the_versions_own_environment(
    steady: Steady, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "steadywheel", "3.1")
    port = free_port()
    config = tmp_path / "serve_config.yaml"
    config.write_text(FASTAPI.format(port=port, apps=APPS, wheels=wheels))
    out = steady.run("deploy", str(config), "--wait", "--timeout", "120", timeout=180)
    assert "runtime_env: built the version's environment" in out.stderr

    assert http_get(port, "/api/") == (200, b'"Hello, world!"')
    status, body = http_get(port, "/api/items/7")
    assert status == 200 and json.loads(body) == {"item_id": 7, "wheel": "3.1"}
    status, body = post(port, "/api/items", {"name": "pen", "price": 2.5})
    assert status == 200 and json.loads(body) == {"created": "pen"}
    assert http_get(port, "/api/stream") == (200, b"0\n1\n2\n")
    status, body = http_get(port, "/api/docs")
    assert status == 200 and b"/api/openapi.json" in body
    status, body = http_get(port, "/api/openapi.json")
    assert status == 200 and "/items/{item_id}" in json.loads(body)["paths"]
    status, body = http_get(port, "/api/ray")  # sealed: no Ray, SteadyServe's stand-in
    assert json.loads(body)["error"].startswith("ray.remote is not provided here")

    # The package is the version's alone: the controller's interpreter has none.
    absent = subprocess.run(
        [sys.executable, "-c", "import steadywheel"], capture_output=True, env=dict(os.environ)
    )
    assert absent.returncode != 0


def test_a_busy_gateway_port_names_the_file_and_the_holder(steady: Steady, tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = tmp_path / "serve_config.yaml"
        config.write_text(TEXT_ML.format(port=port, apps=APPS))
        out = steady.run("deploy", str(config), check=False, timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"gateway port {port} is already in use by pid {os.getpid()} (" in out.stderr
    assert f"the port is http_options.port of {config.resolve()}" in out.stderr
