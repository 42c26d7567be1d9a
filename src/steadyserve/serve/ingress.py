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
    Called with no class, the decorator makes one, as Ray's does.

    As Ray's, a FastAPI app's routes that are the class's methods get the instance
    as ``self`` here, and the class keeps a copy of the app as it is now: routes
    added to the app later, or another class's on the same app, are not its."""
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
        if app is None:
            frozen: Any = BUILD_METHOD
        elif inspect.isfunction(app):  # Ray's builder, or an ASGI app written as a function
            frozen = app
        else:
            make_fastapi_class_based_view(app, target)
            frozen = _frozen(app)
        setattr(target, INGRESS_ATTRIBUTE, frozen)
        return cls

    return mark


def _frozen(app: Any) -> Any:
    """A copy of ``app`` as it is now (Ray's "frozen" app), made as the application
    will be shipped (shipped.py): later changes to ``app`` do not reach it."""
    from steadyserve.serve import shipped

    try:
        return shipped.loads(shipped.dumps(app))
    except Exception as exc:
        raise TypeError(f"Failed to serialize the ASGI app ({type(exc).__name__}: {exc})") from exc


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


def docs_path(app: Any) -> str | None:
    """Where ``app`` serves its docs, as Ray reports an application's: a FastAPI
    app's ``docs_url`` (a late-bound one's once built); None for another app."""
    if isinstance(app, LateApp):
        app = app.app
    try:
        from fastapi import FastAPI
    except ImportError:
        return None
    path = app.docs_url if isinstance(app, FastAPI) else None
    return path if isinstance(path, str) else None


def get_current_servable_instance() -> Any:
    """The replica's instance of its class: ``self`` of a class-based route (a
    FastAPI dependency; Ray's function of this name)."""
    from steadyserve.serve.context import get_replica_context

    return get_replica_context().servable_object


def is_method_of(endpoint: Any, cls: type) -> bool:
    """Whether a route's endpoint is a method written in the body of ``cls`` or of one
    of its bases (Ray matches the MRO): held in a class's namespace (a class shipped
    by value and rebuilt in the replica keeps that, but not always its
    ``__qualname__``), or named under the class (``Class.`` and more: a class
    ``ChildExtra`` is not ``Child``)."""
    if not callable(endpoint):
        return False
    bases = [klass for klass in cls.__mro__ if klass is not object]
    if any(value is endpoint for klass in bases for value in vars(klass).values()):
        return True
    name = str(getattr(endpoint, "__qualname__", ""))
    return any(name.startswith(klass.__qualname__ + ".") for klass in bases)


def _fastapi_routes() -> tuple[Any, ...]:
    try:
        from fastapi.routing import APIRoute, APIWebSocketRoute
    except ImportError:  # not a FastAPI app: nothing to bind
        return ()
    return (APIRoute, APIWebSocketRoute)


def bind_class_routes(app: Any, cls: type) -> int:
    """Give the FastAPI routes that are methods of ``cls`` (or of its bases) the
    replica's instance as ``self`` (a FastAPI dependency), as Ray Serve's
    class-based views do; return how many. Their other parameters become
    keyword-only, which FastAPI reads the same (path, query and body parameters
    keep their meaning). Each such route is made anew, at the end of the app's
    routes as Ray puts it, so FastAPI reads the new signature (FastAPI 0.137 and
    later would nest an ``include_router`` of them, analysed only per request).
    TypeError for a route method without ``self``."""
    kinds = _fastapi_routes()
    router = getattr(app, "router", app)  # a FastAPI app, or an APIRouter
    routes = getattr(router, "routes", None)
    if not kinds or not isinstance(routes, list):
        return 0
    from fastapi import Depends

    mine: list[Any] = [r for r in routes if isinstance(r, kinds) and is_method_of(r.endpoint, cls)]
    for route in mine:
        routes.remove(route)
        signature = inspect.signature(route.endpoint)
        params = list(signature.parameters.values())
        if not params:
            raise TypeError(
                f"route {route.path!r} is the method {route.endpoint.__qualname__} without self"
            )
        self_param = params[0].replace(default=Depends(get_current_servable_instance))
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[1:]]
        endpoint: Any = route.endpoint
        endpoint.__signature__ = signature.replace(parameters=[self_param, *rest])
        endpoint._serve_cls = cls  # Ray's mark: the class whose view this route is
        routes.append(_remade(route, router))
    return len(mine)


def make_fastapi_class_based_view(fastapi_app: Any, cls: type) -> None:
    """Ray's function (``ray.serve._private.http_util``): bind ``cls``'s routes
    (:func:`bind_class_routes`), and drop the routes another class's view bound,
    so one app shared by two ingress classes serves each its own."""
    bind_class_routes(fastapi_app, cls)
    kinds = _fastapi_routes()
    router = getattr(fastapi_app, "router", fastapi_app)
    routes = getattr(router, "routes", None)
    if not kinds or not isinstance(routes, list):
        return
    kept: list[Any] = routes
    routes[:] = [
        r for r in kept if not isinstance(r, kinds) or getattr(r.endpoint, "_serve_cls", cls) is cls
    ]


def _remade(route: Any, router: Any) -> Any:
    """``route`` made again from what it was made with (its attributes bear the
    constructor's parameter names, as FastAPI's own route copying reads them)."""
    names: set[str] = set()
    for klass in type(route).__mro__:
        init = vars(klass).get("__init__")
        if init is not None and klass.__module__.startswith(("fastapi", type(route).__module__)):
            names.update(inspect.signature(init).parameters)
    names -= {"self", "path", "endpoint", "args", "kwargs"}
    kwargs = {name: getattr(route, name) for name in names if hasattr(route, name)}
    provider = "dependency_overrides_provider"  # a websocket route does not keep it
    if provider in names and provider not in kwargs:
        kwargs[provider] = getattr(router, provider, None)
    return type(route)(route.path, route.endpoint, **kwargs)
