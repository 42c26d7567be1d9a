"""``from ray import serve`` as written: SteadyServe's API where Ray Serve cannot import.

Ray Serve applications start with ``from ray import serve``. In a version's own
environment there is no Ray (it is sealed: only SteadyServe's packages and what
the version installs), and in the controller's there may be a Ray without Ray
Serve's dependencies (``No module named 'grpc'``). So the replica runner and the
graph describer, and nothing else (never the controller or the CLI), install
this import hook before they import user code:

- ``import ray.serve`` is tried as is first: when Ray Serve itself imports, it
  is what the user's code gets (their choice wins), and one notice says how to
  switch (``STEADY_RAY_SERVE=steadyserve``);
- when it fails, ``ray.serve``, ``ray.serve.handle`` and ``ray.serve.exceptions``
  are SteadyServe's (the names in :data:`PROVIDED`), with one notice saying so;
- when there is no ``ray`` at all, ``ray`` is a stand-in whose only attribute is
  ``serve``: anything else (``ray.init``, ``import ray.data``) is a one-line
  error naming it.

docs/ray-serve-api.md lists the names; this module is the list.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

SWITCH = "STEADY_RAY_SERVE"
"""``steadyserve``: SteadyServe's API even where Ray Serve is installed; ``auto``
(or unset): Ray Serve when it imports, SteadyServe's otherwise."""
DOCS = "docs/ray-serve-api.md#from-ray-import-serve"

PROVIDED: dict[str, tuple[str, tuple[str, ...] | None]] = {
    # None: every name of SteadyServe's module (``steadyserve.serve.__all__``), so the
    # API and what ``ray.serve`` provides are one list.
    "ray.serve": ("steadyserve.serve", None),
    "ray.serve.handle": (
        "steadyserve.serve.handle",
        ("DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator"),
    ),
    "ray.serve.exceptions": ("steadyserve.serve.exceptions", ("RayServeException",)),
    "ray.serve.config": ("steadyserve.serve.config", ("AutoscalingConfig", "AutoscalingPolicy")),
}
"""Module -> (where SteadyServe defines it, the names it provides; None: its ``__all__``)."""

Say = Callable[[str], None]


class AliasError(ValueError):
    """A bad ``STEADY_RAY_SERVE``; one line naming it."""


def _not_provided(what: str) -> str:
    return (
        f"{what} is not provided here: this environment has no Ray Serve, and SteadyServe"
        " provides only ray.serve, ray.serve.handle, ray.serve.exceptions and"
        f" ray.serve.config; see {DOCS}"
    )


def facade(name: str) -> types.ModuleType:
    """A module ``name`` holding exactly the names :data:`PROVIDED` lists, from
    SteadyServe's own module (the same objects); any other name is one line."""
    source_name, listed = PROVIDED[name]
    source = importlib.import_module(source_name)
    names: Sequence[str] = source.__all__ if listed is None else listed
    module = types.ModuleType(name, source.__doc__)
    for attr in names:
        setattr(module, attr, getattr(source, attr))
    module.__all__ = list(names)  # type: ignore[attr-defined]
    if name == "ray.serve":
        module.__path__ = []  # a package: its submodules are asked of the finder

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(_not_provided(f"{name}.{attr}"))

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def stand_in_ray() -> types.ModuleType:
    """``ray`` where there is none: ``serve`` is set by the import of ``ray.serve``."""
    module = types.ModuleType("ray", "A stand-in for Ray: only ray.serve (SteadyServe's API).")
    module.__path__ = []

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(_not_provided(f"ray.{attr}"))

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


class _Made(importlib.abc.Loader):
    """Loads a module made beforehand (a facade, the stand-in, or Ray Serve itself)."""

    def __init__(self, make: Callable[[], types.ModuleType]) -> None:
        self.make = make
        self.spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = self.make()
        self.spec = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if self.spec is not None:  # Ray Serve's own: keep its own spec
            module.__spec__ = self.spec


class RayServeFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: answers for ``ray`` (when absent) and ``ray.serve*``."""

    def __init__(self, force: bool, say: Say) -> None:
        self.force = force
        self.say = say
        self.real: bool | None = None  # Ray Serve itself imported (None: not asked yet)
        self.stand_in = False
        self._probing = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if self._probing or not (fullname == "ray" or fullname.startswith("ray.")):
            return None
        if fullname == "ray":
            if importlib.machinery.PathFinder.find_spec("ray") is not None:
                return None  # a real Ray: ray.serve is decided below
            self.stand_in = True
            return importlib.machinery.ModuleSpec("ray", _Made(stand_in_ray), is_package=True)
        if fullname == "ray.serve":
            return importlib.machinery.ModuleSpec(fullname, _Made(self._serve), is_package=True)
        if fullname.startswith("ray.serve."):
            if self.real:
                return None
            if fullname in PROVIDED:
                return importlib.machinery.ModuleSpec(
                    fullname, _Made(lambda: facade(fullname)), is_package=False
                )
            raise ModuleNotFoundError(_not_provided(fullname), name="ray.serve")
        if self.stand_in:
            raise ModuleNotFoundError(_not_provided(fullname), name="ray")
        return None

    def _serve(self) -> types.ModuleType:
        why = "this environment has no Ray"
        if not self.force and not self.stand_in:
            self._probing = True
            try:
                module = importlib.import_module("ray.serve")
            except Exception as exc:
                why = "import ray.serve failed: " + " ".join(str(exc).split())[:200]
                # What the failed import left behind must not shadow the facade's modules.
                for name in [n for n in sys.modules if n.split(".")[:2] == ["ray", "serve"]]:
                    del sys.modules[name]
                ray = sys.modules.get("ray")
                if ray is not None and "serve" in vars(ray):
                    delattr(ray, "serve")
            else:
                self.real = True
                self.say(
                    "ray.serve is Ray Serve itself, installed in this environment, and the"
                    " application runs with it; SteadyServe serves applications written with"
                    f" its own API: set {SWITCH}=steadyserve (runtime_env.env_vars) to give"
                    " `from ray import serve` SteadyServe's API instead, or remove ray[serve]"
                    f" from the environment ({DOCS})"
                )
                return module
            finally:
                self._probing = False
        elif self.force:
            why = f"{SWITCH}=steadyserve"
        self.real = False
        self.say(f"`from ray import serve` is SteadyServe's API here ({why}); see {DOCS}")
        return facade("ray.serve")


def _say_notice(message: str) -> None:
    print(f"notice: {message}", file=sys.stderr, flush=True)


def install(environ: dict[str, str] | None = None, say: Say = _say_notice) -> RayServeFinder:
    """Put the finder first on ``sys.meta_path`` (once); AliasError for a bad switch."""
    env = os.environ if environ is None else environ
    mode = env.get(SWITCH, "auto").strip().lower() or "auto"
    if mode not in ("auto", "steadyserve"):
        raise AliasError(f"{SWITCH}={mode!r}: must be steadyserve or auto")
    for finder in sys.meta_path:
        if isinstance(finder, RayServeFinder):
            return finder
    finder = RayServeFinder(force=mode == "steadyserve", say=say)
    sys.meta_path.insert(0, finder)
    return finder


def is_ray_object(obj: object) -> bool:
    """Made by Ray Serve itself (a ``ray.serve`` Application or Deployment)?"""
    return type(obj).__module__.split(".")[0] == "ray"


def ray_object_hint(obj: object, where: str) -> str:
    """The one line for an import path that names a Ray Serve object."""
    return (
        f"{where} is Ray Serve's own {type(obj).__name__} (ray.serve in this environment is"
        f" Ray Serve itself); set {SWITCH}=steadyserve in runtime_env.env_vars so"
        f" `from ray import serve` is SteadyServe's API ({DOCS})"
    )
