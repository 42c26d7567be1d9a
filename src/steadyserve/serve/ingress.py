"""``@serve.ingress(app)``: a deployment whose HTTP side is an ASGI app (FastAPI, Starlette).

The runner serves ``app`` on the replica's port and constructs the class as
usual (``__init__``, ``reconfigure``, ``check_health``, handle calls to its
methods). Route functions are the app's own: Ray's class-based FastAPI routes
(``def root(self)`` inside the class) are not supported, see docs/ray-serve-api.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

INGRESS_ATTRIBUTE = "__steadyserve_ingress__"


def ingress(app: Any) -> Callable[[Any], Any]:
    """Decorate a class (before ``@serve.deployment``) so ``app`` answers its HTTP."""
    if not callable(app):
        raise TypeError(f"serve.ingress expects an ASGI app, not {type(app).__name__}")

    def mark(cls: Any) -> Any:
        target = getattr(cls, "func_or_class", cls)  # above @serve.deployment too
        if not isinstance(target, type):
            raise TypeError("@serve.ingress(app) decorates a class, under @serve.deployment")
        setattr(target, INGRESS_ATTRIBUTE, app)
        return cls

    return mark


def ingress_of(cls: type) -> Any:
    """The ASGI app ``@serve.ingress`` gave this class, or None."""
    return vars(cls).get(INGRESS_ATTRIBUTE)
