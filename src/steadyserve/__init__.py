"""SteadyServe: a fleet of replicas behind one endpoint, updated without dropping a request."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "deployment"]


def __getattr__(name: str) -> Any:
    """``steadyserve.deployment`` (Ray's decorator: options, .bind(), .options()),
    imported on first use so the load balancer and the CLI never load the serve
    stack (steadyserve.serve has the rest of Ray's API)."""
    if name == "deployment":
        from steadyserve.serve.deployment import deployment

        return deployment
    raise AttributeError(f"module 'steadyserve' has no attribute {name!r}")
