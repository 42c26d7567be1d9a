"""Ray Serve's Python API on SteadyServe: ``from steadyserve import serve``.

A ``from ray import serve`` application needs only its import lines changed::

    from steadyserve import serve
    from steadyserve.serve.handle import DeploymentHandle

``serve.run`` and friends talk to the controller of ``STEADY_HOME`` (``api``);
``batch``, ``multiplexed`` and the replica context run inside replicas. What
needs a Ray cluster fails with a one-line message naming the feature and
docs/ray-serve-api.md, never silently.
"""

from __future__ import annotations

from typing import Any

from steadyserve.serve.batching import batch
from steadyserve.serve.context import (
    ReplicaContext,
    get_multiplexed_model_id,
    get_replica_context,
)
from steadyserve.serve.deployment import Application, Deployment, deployment
from steadyserve.serve.exceptions import RayServeException
from steadyserve.serve.handle import (
    DeploymentHandle,
    DeploymentResponse,
    DeploymentResponseGenerator,
)
from steadyserve.serve.ingress import ingress
from steadyserve.serve.multiplex import multiplexed

DOCS = "docs/ray-serve-api.md"

__all__ = [
    "Application",
    "Deployment",
    "DeploymentHandle",
    "DeploymentResponse",
    "DeploymentResponseGenerator",
    "RayServeException",
    "ReplicaContext",
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
    """A Ray Serve feature that needs a Ray cluster."""


# The driver API imports the CLI's client and the spec: loaded on first use, so a
# replica importing ``serve`` for ``@serve.deployment`` does not pay for them.


def run(target: Any, *args: Any, **kwargs: Any) -> DeploymentHandle:
    """Deploy an application and return its ingress handle (see ``api.run``)."""
    from steadyserve.serve import api

    return api.run(target, *args, **kwargs)


def _run(
    target: Any, _blocking: bool = True, name: str = "default", route_prefix: str | None = "/"
) -> DeploymentHandle:
    """Ray's private ``serve._run``: with ``_blocking=False``, deploy and return at once
    (the app may still be deploying, or fail: see ``serve.status()``)."""
    from steadyserve.serve import api

    return api.run(target, name=name, route_prefix=route_prefix, _wait=_blocking)


def start(*args: Any, **kwargs: Any) -> None:
    from steadyserve.serve import api

    api.start(*args, **kwargs)


def shutdown() -> None:
    from steadyserve.serve import api

    api.shutdown()


def delete(name: str, _blocking: bool = True) -> None:
    from steadyserve.serve import api

    api.delete(name, _blocking)


def status() -> Any:
    """Ray's ``ServeStatus``: applications, their deployments, replica states."""
    from steadyserve.serve import api
    from steadyserve.serve.overview import serve_status

    c = api.client()
    gateway = api._call(c, "GET", "/api/v1/gateway")
    return serve_status(api.services(c), gateway.get("port"))


def get_app_handle(name: str) -> DeploymentHandle:
    from steadyserve.serve import api

    return api.get_app_handle(name)


def get_deployment_handle(deployment_name: str, app_name: str | None = None) -> DeploymentHandle:
    """A handle to a deployment by name: inside a replica as if bound into its graph
    (``STEADY_GRAPH_SERVICES`` or the default name), in a driver to that deployment
    of a running application."""
    from steadyserve.serve import api

    handle: DeploymentHandle = api.get_deployment_handle(deployment_name, app_name)
    return handle
