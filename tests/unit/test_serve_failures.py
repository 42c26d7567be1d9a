"""A deployment whose replicas fail before they are ready: ``serve.status()`` shows
Ray's DEPLOY_FAILED with the replicas' reason, and ``serve.run`` raises with it."""

from __future__ import annotations

from typing import Any

import pytest

from steadyserve.serve import api
from steadyserve.serve.overview import serve_status

REASON = (
    "process exited with code 1 before it was ready; its last output: "
    'File "<dynamic-code>", line 8, in __init__ | ZeroDivisionError: division by zero'
)


def _failed_service() -> dict[str, Any]:
    return {
        "name": "default-A",
        "application": "default",
        "deployment": "A",
        "status": "FAILED",
        "version": 2,
        "uptime_s": 1,
        "update": None,
        "replicas": [
            {"id": 1, "version": 1, "status": "FAILED", "reason": "an old version's reason"},
            {"id": 2, "version": 2, "status": "FAILED", "reason": REASON},
            {"id": 3, "version": 2, "status": "FAILED", "reason": REASON},
        ],
    }


def test_a_failed_version_is_deploy_failed_with_its_replicas_reason() -> None:
    app = serve_status([_failed_service()], 8000).applications["default"]
    assert app.status == "DEPLOY_FAILED"
    deployment = app.deployments["A"]
    assert deployment.status == "DEPLOY_FAILED"
    assert deployment.message == REASON  # once, and not the old version's


class _Client:
    """Answers the services query as a controller with ``services`` would."""

    def __init__(self, services: list[dict[str, Any]]) -> None:
        self.services = services

    def call(self, method: str, path: str, body: Any = None, timeout: float = 0) -> Any:
        assert (method, path.split("?")[0]) == ("GET", "/api/v1/services")
        return {"services": self.services}


def test_serve_run_says_why_a_deployment_failed() -> None:
    client: Any = _Client([_failed_service()])
    with pytest.raises(RuntimeError) as raised:
        api.wait_running(client, "default", ["default-A"])
    message = str(raised.value)
    assert "ZeroDivisionError: division by zero" in message
    assert message.endswith("see `steady logs default-A`")


def test_a_rolled_back_update_says_its_message() -> None:
    svc = {
        **_failed_service(),
        "status": "READY",
        "replicas": [],
        "update": {"status": "ROLLED_BACK", "message": "version 2 failed its health checks"},
    }
    client: Any = _Client([svc])
    with pytest.raises(RuntimeError, match="version 2 failed its health checks"):
        api.wait_running(client, "default", ["default-A"])
    deployment = serve_status([svc], 8000).applications["default"].deployments["A"]
    assert (deployment.status, deployment.message) == (
        "DEPLOY_FAILED",
        "version 2 failed its health checks",
    )


def test_steady_status_format_ray_says_the_same() -> None:
    from steadyserve.cli.ray_status import ray_status

    app = ray_status([_failed_service()])["applications"]["default"]
    assert app["status"] == "DEPLOY_FAILED"
    assert (app["deployments"]["A"]["status"], app["deployments"]["A"]["message"]) == (
        "DEPLOY_FAILED",
        REASON,
    )
