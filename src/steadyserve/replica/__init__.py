"""The runner for Python replicas (``python -m steadyserve.replica``) and the
``@deployment`` decorator user code imports.

Only the decorator is imported here: user modules import this package, and
should not pay for the server stack when a test or notebook uses the class.
"""

from steadyserve.wire.deployment import DeploymentOptions, deployment

__all__ = ["DeploymentOptions", "deployment"]
