"""Import ``module.sub:attr`` and say what it is: a class, an ASGI app or a deployment.

Every way this can go wrong is a user mistake, so each becomes one line that
names the module or attribute (``LoadError``), never a traceback: the controller
shows a replica's last log line, and ``steady up`` shows ``--describe``'s.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import traceback
from dataclasses import dataclass, field
from typing import Any, Literal

from steadyserve.replica import graph
from steadyserve.serve import graph as serve_graph
from steadyserve.serve import ray_alias
from steadyserve.serve.errors import LoadError
from steadyserve.serve.names import split_import_path
from steadyserve.wire.deployment import options_of

__all__ = ["Kind", "LoadError", "Target", "load"]

Kind = Literal["class", "asgi", "deployment"]


@dataclass(frozen=True)
class Target:
    """What an import path resolved to."""

    import_path: str
    kind: Kind
    obj: Any
    options: dict[str, Any] = field(default_factory=dict)
    # A graph node's constructor arguments (bound deployments already handles).
    init_args: tuple[Any, ...] = ()
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    ingress: Any = None  # the ASGI app of an @serve.ingress class
    deployment_name: str | None = None  # a graph node's deployment (the replica context)

    @property
    def is_class(self) -> bool:
        """Classes and deployments are hosted the same way; only their defaults differ."""
        return self.kind != "asgi"

    def describe(self) -> dict[str, Any]:
        """What ``--describe`` prints: enough for the CLI to merge defaults and
        to refuse a ``user_config`` that nothing could receive."""
        return {
            "kind": self.kind,
            "options": self.options,
            "has_reconfigure": self.is_class and has_method(self.obj, "reconfigure"),
            "has_check_health": self.is_class and has_method(self.obj, "check_health"),
        }


def load(import_path: str) -> Target:
    """Import the module and classify the attribute; ``LoadError`` on any problem."""
    module_name, names = split_import_path(import_path)
    module = _import_module(module_name)
    obj: Any = module
    owner = f"module {module_name!r}"
    for depth, name in enumerate(names, start=1):
        if graph.is_graph(obj):  # ``module:app.Translator``: a node of the graph
            obj = graph.node(obj, name, owner)
            owner = repr(f"{module_name}:{'.'.join(names[:depth])}")
            continue
        if not hasattr(obj, name):
            raise LoadError(f"{owner} has no attribute {name!r}{_did_you_mean(obj, name)}")
        obj = getattr(obj, name)
        owner = repr(f"{module_name}:{'.'.join(names[:depth])}")
    return classify(import_path, obj)


def classify(import_path: str, obj: Any) -> Target:
    if graph.is_graph(obj):
        node = graph.resolve(import_path, obj)
        return Target(
            import_path,
            "deployment",
            node.cls,
            serve_graph.jsonable(node.options),
            node.init_args,
            node.init_kwargs,
            node.ingress,
            node.name,
        )
    if isinstance(obj, type):
        if not has_method(obj, "__call__"):
            raise LoadError(f"{import_path!r} is a class without a __call__(self, request) method")
        options = options_of(obj)
        if options is not None:
            return Target(import_path, "deployment", obj, options.as_dict())
        return Target(import_path, "class", obj)
    if is_asgi_app(obj):
        return Target(import_path, "asgi", obj)
    if ray_alias.is_ray_object(obj):
        raise LoadError(ray_alias.ray_object_hint(obj, repr(import_path)))
    raise LoadError(
        f"{import_path!r} is not a class, an ASGI app or a deployment (it is {_a_kind_of(obj)})"
    )


def has_method(cls: type, name: str) -> bool:
    """Defined by the class or a base of its own, not inherited from ``object``/``type``."""
    return any(name in vars(klass) for klass in cls.__mro__ if klass is not object)


def is_asgi_app(obj: object) -> bool:
    """An ASGI 3 application: an async callable taking (scope, receive, send)."""
    if not callable(obj) or isinstance(obj, type):
        return False
    call = obj if inspect.isfunction(obj) or inspect.ismethod(obj) else type(obj).__call__
    if not inspect.iscoroutinefunction(call) and not inspect.iscoroutinefunction(obj):
        return False
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in signature.parameters.values())
    return len(positional) == 3 or (variadic and len(positional) <= 3)


def _import_module(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise LoadError(f"cannot import module {module_name!r} ({exc})") from None
        raise LoadError(f"cannot import module {module_name!r} ({_one_line(exc)})") from None
    except Exception as exc:  # the module's own code failed: say where
        raise LoadError(f"cannot import module {module_name!r} ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    user_frames = [f for f in frames if "importlib" not in f.filename]
    if user_frames and not isinstance(exc, SyntaxError):
        last = user_frames[-1]
        where = f" at {last.filename}:{last.lineno}"
    return f"{type(exc).__name__}: {text}{where}" if text else f"{type(exc).__name__}{where}"


def _did_you_mean(obj: object, name: str) -> str:
    public = [n for n in dir(obj) if not n.startswith("_")]
    close = difflib.get_close_matches(name, public, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _a_kind_of(obj: object) -> str:
    if inspect.isfunction(obj):
        return "a function"
    if inspect.ismodule(obj):
        return "a module"
    name = type(obj).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"
