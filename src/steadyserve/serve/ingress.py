"""``@serve.ingress(app)``: a deployment whose HTTP side is an ASGI app (FastAPI, Starlette).

The runner serves ``app`` on the replica's port and constructs the class as
usual (``__init__``, ``reconfigure``, ``check_health``, handle calls to its
methods). Routes may be the app's own functions or, as Ray's FastAPI docs write
them, methods of the class (``@app.get("/") def root(self)``):
:func:`bind_class_routes` makes FastAPI pass them the replica's instance as
``self``, the way Ray Serve does, so they answer with the instance's state.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

INGRESS_ATTRIBUTE = "__steadyserve_ingress__"
BUILD_METHOD = "__serve_build_asgi_app__"
"""Ray's method that makes a late-bound ingress's app from the instance; also the
value marking such a class (a string: it survives shipping by value)."""


def ingress(app: Any = None) -> Callable[..., Any]:
    """Decorate a class (before ``@serve.deployment``) so ``app`` answers its HTTP.
    ``app`` may be Ray's builder (a function of no arguments returning the app), or
    absent: the class's ``__serve_build_asgi_app__`` makes it after the constructor.
    Called with no class, the decorator makes one, as Ray's does."""
    if app is not None and not callable(app):
        raise TypeError(f"serve.ingress expects an ASGI app, not {type(app).__name__}")

    def mark(cls: Any = None) -> Any:
        if cls is None:  # Ray's serve.deployment(serve.ingress(app)()): no class of the user's

            class ASGIIngressDeployment:
                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    self.args, self.kwargs = args, kwargs

            cls = ASGIIngressDeployment
        target = getattr(cls, "func_or_class", cls)  # above @serve.deployment too
        # Ray's refusals, word for word (Ray 2.60's serve.ingress): HTTP goes to the
        # app, so a __call__ would never be called by it.
        if not isinstance(target, type):
            raise ValueError("@serve.ingress must be used with a class.")
        if any("__call__" in vars(klass) for klass in target.__mro__):  # collections.abc.Callable
            raise ValueError("Classes passed to @serve.ingress may not have __call__ method.")
        if app is None and not hasattr(target, BUILD_METHOD):
            raise ValueError(
                "serve.ingress() called without an app argument requires "
                f"{target.__name__} to define `{BUILD_METHOD}`."
            )
        setattr(target, INGRESS_ATTRIBUTE, BUILD_METHOD if app is None else app)
        return cls

    return mark


def ingress_of(cls: type) -> Any:
    """The ASGI app ``@serve.ingress`` gave this class, or None."""
    return vars(cls).get(INGRESS_ATTRIBUTE)


def is_builder(app: Any) -> bool:
    """Is what ``@serve.ingress`` was given Ray's builder, a plain function taking no
    arguments that returns the ASGI app on the replica? (An ASGI app written as a
    function takes ``scope, receive, send``.)"""
    if not inspect.isfunction(app):
        return False
    required = [
        p
        for p in inspect.signature(app).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return not required


class LateApp:
    """A late-bound ingress's app: set from ``__serve_build_asgi_app__`` once the
    instance is constructed, before the app server starts."""

    def __init__(self) -> None:
        self.app: Any = None

    async def build(self, instance: Any) -> None:
        made = getattr(instance, BUILD_METHOD)()
        if inspect.isawaitable(made):
            made = await made
        if made is None:
            raise TypeError(f"`{BUILD_METHOD}` must return an ASGI app.")
        self.app = made

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def asgi_app(cls: type) -> Any:
    """The ASGI app the replica of ``cls`` serves: the one given, the one its builder
    makes (called once, when the replica loads), or a :class:`LateApp` the
    instance fills in. None for no ingress."""
    app = ingress_of(cls)
    if isinstance(app, str) and app == BUILD_METHOD:
        return LateApp()
    return app() if is_builder(app) else app


def _servable() -> Any:
    """The replica's instance of its class: ``self`` of a class-based route."""
    from steadyserve.serve.context import get_replica_context

    return get_replica_context().servable_object


def is_method_of(endpoint: Any, cls: type) -> bool:
    """Whether a route's endpoint is a method written in ``cls``'s body: held in the
    class's namespace (a class shipped by value and rebuilt in the replica keeps
    that, but not always its ``__qualname__``), or named under the class."""
    if not callable(endpoint):
        return False
    if any(value is endpoint for value in vars(cls).values()):
        return True
    return str(getattr(endpoint, "__qualname__", "")).startswith(cls.__qualname__ + ".")


def bind_class_routes(app: Any, cls: type) -> int:
    """Give the FastAPI routes that are methods of ``cls`` the replica's instance
    as ``self`` (a FastAPI dependency), as Ray Serve's class-based views do; return
    how many. Their other parameters become keyword-only, which FastAPI reads the
    same (path, query and body parameters keep their meaning). TypeError for a
    route method without ``self``."""
    try:
        from fastapi import APIRouter, Depends
        from fastapi.routing import APIRoute, APIWebSocketRoute
    except ImportError:  # not a FastAPI app: nothing to bind
        return 0
    routes = [
        route
        for route in getattr(app, "routes", None) or []
        if isinstance(route, (APIRoute, APIWebSocketRoute)) and is_method_of(route.endpoint, cls)
    ]
    if not routes:
        return 0
    router = APIRouter()
    for route in routes:
        app.router.routes.remove(route)
        signature = inspect.signature(route.endpoint)
        params = list(signature.parameters.values())
        if not params:
            raise TypeError(
                f"route {route.path!r} is the method {route.endpoint.__qualname__} without self"
            )
        first = params[0].replace(default=Depends(_servable))
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[1:]]
        endpoint: Any = route.endpoint
        endpoint.__signature__ = signature.replace(parameters=[first, *rest])
        endpoint.__steadyserve_bound__ = True
        router.routes.append(route)
    app.include_router(router)  # FastAPI analyses the new signatures here
    return len(routes)
