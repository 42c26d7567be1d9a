"""Ray Serve's Python API on SteadyServe: ``from steadyserve import serve``.

A ``from ray import serve`` application needs only its import lines changed::

    from steadyserve import serve
    from steadyserve.serve.handle import DeploymentHandle

What is not supported fails with a one-line message naming the feature and
docs/ray-serve-api.md, never silently.
"""

from __future__ import annotations

from typing import Any, NoReturn

from steadyserve.serve.deployment import Application, Deployment, deployment
from steadyserve.serve.handle import (
    DeploymentHandle,
    DeploymentResponse,
    DeploymentResponseGenerator,
)
from steadyserve.serve.ingress import ingress

DOCS = "docs/ray-serve-api.md"

__all__ = [
    "Application",
    "Deployment",
    "DeploymentHandle",
    "DeploymentResponse",
    "DeploymentResponseGenerator",
    "batch",
    "delete",
    "deployment",
    "get_app_handle",
    "get_deployment_handle",
    "get_multiplexed_model_id",
    "get_replica_context",
    "ingress",
    "multiplexed",
    "run",
    "shutdown",
    "start",
    "status",
]


class NotSupportedError(NotImplementedError):
    """A Ray Serve feature SteadyServe does not have."""


def _unsupported(feature: str, instead: str) -> NoReturn:
    raise NotSupportedError(f"{feature} is not supported by SteadyServe; {instead} (see {DOCS})")


def batch(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("@serve.batch", "batch inside your method, or send lists")


def multiplexed(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("@serve.multiplexed", "deploy one service per model")


def get_multiplexed_model_id() -> NoReturn:
    _unsupported("serve.get_multiplexed_model_id", "deploy one service per model")


def get_replica_context() -> NoReturn:
    _unsupported(
        "serve.get_replica_context",
        "read STEADY_SERVICE_NAME and STEADY_REPLICA_ID from the environment",
    )


def run(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("serve.run", "run `steady deploy` with a service or serve_config file")


def start(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("serve.start", "`steady deploy` starts the controller")


def shutdown(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("serve.shutdown", "run `steady down`")


def delete(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("serve.delete", "run `steady down SERVICE`")


def status(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("serve.status", "run `steady status`")


def get_app_handle(*args: Any, **kwargs: Any) -> NoReturn:
    _unsupported("serve.get_app_handle", "bind the deployment into your graph to get a handle")


def get_deployment_handle(deployment_name: str, app_name: str = "default") -> DeploymentHandle:
    """A handle to a deployment by name (its service: ``STEADY_GRAPH_SERVICES`` or the
    default name), as if it had been bound into this graph."""
    return DeploymentHandle(deployment_name, app_name)
