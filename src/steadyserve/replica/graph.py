"""The runner's side of ``.bind()`` graphs: which node this replica hosts, and how.

An import path may name a ``Deployment``, an ``Application`` (``.bind()``) or an
app builder (``def build(args) -> Application``, called with ``STEADY_APP_ARGS``).
``module:app`` hosts the graph's ingress; ``module:app.Translator`` the node
named Translator. The node's bound arguments are its constructor's; a bound
deployment among them becomes a ``DeploymentHandle`` to that deployment's service.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from steadyserve.serve import graph as serve_graph
from steadyserve.serve.deployment import Application, Deployment, replace_nodes
from steadyserve.serve.errors import LoadError
from steadyserve.serve.handle import DeploymentHandle
from steadyserve.serve.ingress import asgi_app, bind_class_routes, is_method_of


@dataclass(frozen=True)
class Node:
    """What the loader needs to host one graph node."""

    cls: type
    options: dict[str, Any]
    init_args: tuple[Any, ...]
    init_kwargs: dict[str, Any]
    ingress: Any
    name: str


def is_builder(obj: Any) -> bool:
    """Ray's app builders: ``def build(args: dict) -> Application``; recognised by
    the return annotation or a first parameter named ``args``."""
    if not inspect.isfunction(obj):
        return False
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    params = list(signature.parameters.values())
    returns = signature.return_annotation
    named = getattr(returns, "__name__", returns)
    return len(params) >= 1 and (params[0].name == "args" or "Application" in str(named))


def is_graph(obj: Any) -> bool:
    return isinstance(obj, (Application, Deployment)) or is_builder(obj)


def _application(obj: Any, where: str) -> Application:
    try:
        args = serve_graph.app_args_from_env() if is_builder(obj) else None
        return serve_graph.as_application(obj, where, args)
    except serve_graph.GraphError as exc:
        raise LoadError(str(exc)) from None


def node(obj: Any, name: str, owner: str) -> Application:
    """Step from a graph into its node ``name``."""
    app = _application(obj, owner)
    found = serve_graph.find_node(app, name)
    if found is None:
        names = ", ".join(repr(n.name) for n in app.nodes())
        raise LoadError(f"{owner} has no deployment named {name!r} (it has {names})")
    return found


def resolve(import_path: str, obj: Any) -> Node:
    app = _application(obj, repr(import_path))
    target = app.deployment.func_or_class
    cls = target if isinstance(target, type) else function_class(target)

    def to_handle(bound: Application) -> DeploymentHandle:
        return DeploymentHandle(bound.name)

    try:
        ingress = asgi_app(cls)
    except Exception as exc:  # the user's builder
        raise LoadError(f"the ingress builder of {cls.__name__} raised {exc!r}") from None
    if ingress is not None:
        try:
            bind_class_routes(ingress, cls)
        except TypeError as exc:
            raise LoadError(str(exc)) from None
        _refuse_unbound_class_routes(ingress, cls)
    options = {k: v for k, v in app.deployment.user_options.items() if k != "name"}
    return Node(
        cls=cls,
        options=options,
        init_args=tuple(replace_nodes(list(app.args), to_handle)),
        init_kwargs=dict(replace_nodes(dict(app.kwargs), to_handle)),
        ingress=ingress,
        name=app.name,
    )


def function_class(func: Any) -> type:
    """A function deployment hosted as a class whose ``__call__`` is the function, so
    HTTP requests and handle calls reach it as they reach a class (async stays
    async, generators stream)."""

    async def call_gen(self: Any, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    async def call_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await func(*args, **kwargs)

    def call_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    call: Any = call_sync
    if inspect.isasyncgenfunction(func):
        call = call_gen
    elif inspect.iscoroutinefunction(func):
        call = call_async

    from steadyserve.replica.user import HTTP_ARGS_ATTR, takes_positional  # user imports loader

    name = getattr(func, "__name__", "function")
    attrs = {"__call__": call, "__qualname__": name, "__doc__": func.__doc__}
    attrs[HTTP_ARGS_ATTR] = takes_positional(func, method=False)
    return type(name, (), attrs)


def _refuse_unbound_class_routes(ingress: Any, cls: type) -> None:
    """A method of the class routed by a plain Starlette app would get the request
    as ``self``: only FastAPI's routes can be given the instance; refuse by name."""
    for route in getattr(ingress, "routes", None) or []:
        endpoint = getattr(route, "endpoint", None)
        name = str(getattr(endpoint, "__qualname__", ""))
        if is_method_of(endpoint, cls) and getattr(endpoint, "_serve_cls", None) is None:
            raise LoadError(
                f"route {getattr(route, 'path', '?')!r} is the method {name}: class-based"
                " routes need a FastAPI app (@app.get(...) on the method, as Ray's docs"
                " write them); with Starlette, route functions outside the class"
            )
