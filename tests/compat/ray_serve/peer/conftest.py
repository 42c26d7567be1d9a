"""Ray's ``serve_instance`` fixture on SteadyServe: one controller per test file (in a
temporary STEADY_HOME, its gateway on a free port), every application deleted after
each test, as Ray's fixture does between tests of one Ray cluster.

The object it yields stands in for Ray's ``ServeControllerClient`` where Ray's
tests read it: ``get_serve_details()`` and ``_controller._all_running_replicas``,
both answered from the controller's service list, and
``_controller.get_docs_path``, an application's docs path as the controller
answers it (serve/app_ingress.py).
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steadyserve import serve
from steadyserve.serve import api, app_ingress
from steadyserve.serve.context import DeploymentID
from tests.helpers.steady import Steady, processes_of_home

ENV = ("STEADY_HOME", "STEADY_SERVE_HTTP_PORT", "STEADY_SERVE_RUN_TIMEOUT_S")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Controller:
    class _AllRunningReplicas:
        def remote(self) -> dict[DeploymentID, list[str]]:
            out: dict[DeploymentID, list[str]] = {}
            for svc in api.services(api.client()):
                if not svc.get("application"):
                    continue
                key = DeploymentID(name=str(svc.get("deployment")), app_name=svc["application"])
                replicas = [r for r in svc.get("replicas") or [] if r.get("status") == "READY"]
                out[key] = [str(r.get("id")) for r in replicas]
            return out

    _all_running_replicas = _AllRunningReplicas()

    class _GetDocsPath:
        def remote(self, app_name: str) -> str | None:
            return app_ingress.docs_path(app_name)

    get_docs_path = _GetDocsPath()


class ServeInstance:
    """What Ray's tests read from their ``serve_instance`` client."""

    _controller = _Controller()

    def get_serve_details(self) -> dict[str, Any]:
        apps: dict[str, Any] = {}
        for svc in api.services(api.client()):
            app = svc.get("application")
            if not app:
                continue
            deployments = apps.setdefault(app, {"deployments": {}})["deployments"]
            deployments[str(svc.get("deployment"))] = {
                "deployment_config": {"max_ongoing_requests": svc.get("max_ongoing_requests")}
            }
        return {"applications": apps}


@pytest.fixture(scope="module")
def steady_serve_home() -> Iterator[Steady]:
    saved = {k: os.environ.get(k) for k in ENV}
    with tempfile.TemporaryDirectory(prefix="steady-rayport-") as tmp:
        home = Path(tmp) / "home"
        os.environ["STEADY_HOME"] = str(home)
        os.environ["STEADY_SERVE_HTTP_PORT"] = str(_free_port())
        os.environ["STEADY_SERVE_RUN_TIMEOUT_S"] = "60"
        cli = Steady(home)
        try:
            serve.start()
            yield cli
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


@pytest.fixture
def serve_instance(steady_serve_home: Steady) -> Iterator[ServeInstance]:
    """Ray's fixture deletes every application between tests (``delete_all_apps``)
    and keeps Serve itself, its proxy and port, running for the next test."""
    yield ServeInstance()
    for app in list(serve.status().applications):
        serve.delete(app)
