"""``@serve.deployment``, ``.options()`` and ``.bind()``: Ray Serve's deployment API.

A ``Deployment`` wraps the user's class with its options; ``.bind(*args)``
returns an ``Application``: one node of a graph whose constructor arguments may
be other bound deployments. Nothing runs here: the runner
(``python -m steadyserve.replica``) hosts one node per service, and
``steadyserve.serve.graph`` describes the whole graph for the CLI.

Unlike Ray, calling a ``Deployment`` constructs the class, so tests and
notebooks can use the class directly.
"""

from __future__ import annotations

import inspect
import io
import json
import pickle
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

from steadyserve.wire.deployment import DeploymentOptions

C = TypeVar("C", bound=type)

DOCS = "docs/ray-serve-api.md"

# Ray's options that SteadyServe acts on (the runner's settings, the CLI's defaults).
ACTED_ON = (
    "num_replicas",
    "user_config",
    "max_ongoing_requests",
    "max_queued_requests",
    "autoscaling_config",
    "health_check_period_s",
    "health_check_timeout_s",
    "graceful_shutdown_wait_loop_s",
    "graceful_shutdown_timeout_s",
)
# Ray's options that have no meaning for local processes: accepted so a Ray app
# runs unchanged, and named once on stderr so nobody believes they took effect.
NOT_APPLICABLE = (
    "ray_actor_options",
    "placement_group_bundles",
    "placement_group_strategy",
    "max_replicas_per_node",
    "logging_config",
    "version",
    "route_prefix",
    "request_router_config",
    "request_router_class",
)
ALL_OPTIONS = ("name", *ACTED_ON, *NOT_APPLICABLE)
# What a deployment that sets none gets: the service spec's default (ServiceSection).
DEFAULT_MAX_ONGOING_REQUESTS = 100


def coerce_options(options: dict[str, Any]) -> dict[str, Any]:
    """Ray validates options with pydantic, which takes ``num_replicas="3"`` as 3: app
    builders pass their string arguments straight through (``args["num_replicas"]``)."""
    replicas = options.get("num_replicas")
    if isinstance(replicas, str) and replicas.strip().isdigit():
        return {**options, "num_replicas": int(replicas)}
    return options


def check_options(options: dict[str, Any], where: str) -> None:
    """Raise ``TypeError`` for an unknown option, ``ValueError`` for a bad value."""
    for key in options:
        if key not in ALL_OPTIONS:
            raise TypeError(f"{where}: unknown option {key!r} (see {DOCS})")
    name = options.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"{where}(name={name!r}): must be a non-empty string")
    queued = options.get("max_queued_requests")
    if queued is not None and (
        isinstance(queued, bool) or not isinstance(queued, int) or queued < -1
    ):
        raise ValueError(f"{where}(max_queued_requests={queued!r}): must be an integer >= -1")
    if "max_ongoing_requests" in options and options["max_ongoing_requests"] is None:
        raise ValueError(f"{where}(max_ongoing_requests=None): must be an integer >= 1")
    bundles = options.get("placement_group_bundles")
    if bundles is not None:
        _check_bundles(bundles, where)
        if options.get("max_replicas_per_node") is not None:
            raise ValueError(
                "Setting max_replicas_per_node is not allowed when "
                "placement_group_bundles is provided."
            )
    scaling = options.get("autoscaling_config")
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError(f"{where}(autoscaling_config=...): must be a dict")
    replicas = options.get("num_replicas")
    checked = {k: options[k] for k in DeploymentOptions.__dataclass_fields__ if k in options}
    if replicas == "auto":
        checked.pop("num_replicas")
    DeploymentOptions(**checked)  # the same checks and messages as @steadyserve.deployment


def _check_bundles(bundles: Any, where: str) -> None:
    """Ray refuses bad bundles when the deployment is defined: so does this (the
    bundles themselves only mean something on a Ray cluster)."""
    bad = ValueError(
        f"{where}(placement_group_bundles=...): must be a non-empty list of non-empty "
        "resource dicts, with at least one resource above 0 in each"
    )
    if not isinstance(bundles, list) or not bundles:
        raise bad
    for bundle in bundles:
        if not isinstance(bundle, dict) or not bundle:
            raise bad
        values = list(bundle.values())
        if not all(isinstance(v, (int, float)) and v >= 0 for v in values):
            raise bad
        if not any(v > 0 for v in values):
            raise bad


class Deployment:
    """A class (or a function: a function deployment) and its options; ``bind`` it to
    make an application."""

    def __init__(self, func_or_class: Any, options: dict[str, Any]) -> None:
        self.func_or_class = func_or_class
        self._options = dict(options)
        self._config: DeploymentConfig | None = None

    @property
    def name(self) -> str:
        name = self._options.get("name")
        return name if isinstance(name, str) else self.func_or_class.__name__

    @property
    def user_options(self) -> dict[str, Any]:
        """The options the user gave (decorator, then ``.options()``), name included."""
        return dict(self._options)

    @property
    def _deployment_config(self) -> DeploymentConfig:
        """Ray's name for what Ray's tests read: which options the user set."""
        if self._config is None:  # one object, as Ray's: callers may edit its set
            self._config = DeploymentConfig(set(self._options))
        return self._config

    def options(self, **options: Any) -> Deployment:
        """A copy with these options changed; the original is left alone."""
        options = coerce_options(options)
        merged = {**self._options, **options}
        check_options(merged, f"{self.name}.options")
        _note_not_applicable(options, self.name)
        return Deployment(self.func_or_class, merged)

    def bind(self, *args: Any, **kwargs: Any) -> Application:
        """One node of an application: this deployment with its constructor arguments."""
        return Application(self, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Construct the class (or call the function) directly (SteadyServe only; Ray
        raises here)."""
        return self.func_or_class(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Class attributes (constants, static helpers) stay reachable through the deployment.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.func_or_class, name)

    def __repr__(self) -> str:
        return f"Deployment(name={self.name!r})"


class DeploymentConfig:
    """The options a user set on a deployment, by name, and their wire form: what
    tells "the user chose this" from "the default" when a ``serve_config.yaml`` or
    a service file is merged with the decorator (the file wins only where set)."""

    def __init__(self, user_configured_option_names: set[str] | None = None) -> None:
        self.user_configured_option_names = set(user_configured_option_names or ())

    def to_proto_bytes(self) -> bytes:
        return json.dumps(sorted(self.user_configured_option_names)).encode()

    @classmethod
    def from_proto_bytes(cls, data: bytes) -> DeploymentConfig:
        names = json.loads(data)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("DeploymentConfig bytes must be a JSON list of option names")
        return cls(set(names))


# The schema a deployment becomes in a graph description: its name and the options
# the user set, less ``version`` (a Ray cluster's, not part of a service).
_UNSCHEMATIZED = ("name", "version")


def deployment_to_schema(d: Deployment) -> dict[str, Any]:
    """The deployment as the graph description holds it: its name and options."""
    options = {k: v for k, v in d.user_options.items() if k not in _UNSCHEMATIZED}
    return {"name": d.name, **options}


def schema_to_deployment(schema: dict[str, Any]) -> Deployment:
    """A deployment with the schema's options, for the code the import path names
    (here a placeholder: a schema holds no code)."""
    options = {k: v for k, v in schema.items() if k != "version"}
    check_options(options, "schema_to_deployment")

    def placeholder() -> None:
        raise RuntimeError("a deployment built from a schema has no code of its own")

    placeholder.__name__ = str(schema.get("name") or "placeholder")
    return Deployment(placeholder, options)


class Application:
    """A bound deployment: ``Translator.bind()``; its arguments may be applications too."""

    def __init__(self, deployment: Deployment, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.deployment = deployment
        self.args = args
        self.kwargs = kwargs

    @property
    def name(self) -> str:
        return self.deployment.name

    def nodes(self) -> Iterator[Application]:
        """This node then every bound deployment reachable from its arguments, once
        each, callers before callees."""
        seen: set[int] = set()
        queue: list[Application] = [self]
        while queue:
            node = queue.pop(0)
            if id(node) in seen:
                continue
            seen.add(id(node))
            yield node
            queue.extend(children(node.args) + children(node.kwargs))

    def __repr__(self) -> str:
        return f"Application({self.name!r})"


_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray)


def children(value: Any) -> list[Application]:
    """The applications in ``value``: nested in lists, tuples and dict values, and,
    as Ray finds them, anywhere inside other objects (a wrapper holding a bound
    deployment in an attribute)."""
    if isinstance(value, Application):
        return [value]
    if isinstance(value, (list, tuple)):
        return [a for item in value for a in children(item)]
    if isinstance(value, dict):
        return [a for item in value.values() for a in children(item)]
    if isinstance(value, _PLAIN) or inspect.isroutine(value) or inspect.isclass(value):
        return []
    return _scan(value)[1]


def replace_nodes(value: Any, replace: Callable[[Application], Any]) -> Any:
    """``value`` with each application in it replaced by ``replace(app)``; an object
    holding one comes back as a copy holding the replacement (Ray's rule too)."""
    if isinstance(value, Application):
        return replace(value)
    if isinstance(value, list):
        return [replace_nodes(item, replace) for item in value]
    if isinstance(value, tuple):
        return tuple(replace_nodes(item, replace) for item in value)
    if isinstance(value, dict):
        return {key: replace_nodes(item, replace) for key, item in value.items()}
    if not children(value):
        return value
    data, found = _scan(value)

    class _Rebuild(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            return replace(found[int(pid)])

    return _Rebuild(io.BytesIO(data)).load()


def _scan(value: Any) -> tuple[bytes, list[Application]]:
    """``value`` pickled (cloudpickle: classes defined in functions too) with each
    application in it left out as a reference, and those applications in order.
    What cannot be pickled holds none that could be shipped: nothing found."""
    import cloudpickle  # type: ignore[import-untyped]

    found: list[Application] = []

    class _Find(cloudpickle.Pickler):  # type: ignore[misc]
        def persistent_id(self, obj: Any) -> str | None:
            if isinstance(obj, Application):
                found.append(obj)
                return str(len(found) - 1)
            return None

    out = io.BytesIO()
    try:
        _Find(out).dump(value)
    except Exception:
        return b"", []
    return out.getvalue(), found


_noted: set[tuple[str, str]] = set()


def _note_not_applicable(options: dict[str, Any], name: str) -> None:
    for key in options:
        if key in NOT_APPLICABLE and (name, key) not in _noted:
            _noted.add((name, key))
            print(
                f"steadyserve: deployment {name!r}: {key} does not apply to local "
                f"replicas and is ignored (see {DOCS})",
                file=sys.stderr,
            )


@overload
def deployment(_func_or_class: C, /) -> Deployment: ...


@overload
def deployment(_func_or_class: Callable[..., Any], /) -> Deployment: ...


@overload
def deployment(
    _func_or_class: None = None, /, **options: Any
) -> Callable[[Callable[..., Any]], Deployment]: ...


def deployment(_func_or_class: Any = None, /, **options: Any) -> Any:
    """``@serve.deployment`` or ``@serve.deployment(name=..., num_replicas=..., ...)``.

    Options are Ray Serve's; they are checked here, at import time, so a bad
    value fails ``steady deploy`` rather than every replica."""
    if isinstance(_func_or_class, str):  # Ray 1.x: @serve.deployment("name", ...)
        options = {"name": _func_or_class, **options}
        _func_or_class = None
    options = coerce_options(options)
    check_options(options, "deployment")

    def make(target: Any) -> Deployment:
        if not isinstance(target, type) and not inspect.isfunction(target):
            raise TypeError(
                f"@serve.deployment decorates a class or a function, not {type(target).__name__}"
            )
        made = Deployment(target, options)
        _note_not_applicable(options, made.name)
        return made

    if _func_or_class is None:
        return make
    return make(_func_or_class)
