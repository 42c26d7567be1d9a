"""``import ray`` where Ray is not installed: what a Ray Serve driver script touches.

SteadyServe installs one top-level module, ``ray.py`` (beside its package), and
never a ``ray/`` package: pip writes no file of Ray's, and where Ray itself is
installed in the same folder its ``ray/`` package is found before ``ray.py``
(a package directory wins over a module of the same name). Where Ray sits in
another folder of ``sys.path``, ``ray.py`` finds it there and loads it in its
own place, so a real Ray is never shadowed. Otherwise ``ray.py`` hands itself to
:func:`adopt`: ``ray.serve`` and its submodules are SteadyServe's (the names
:mod:`steadyserve.serve.ray_alias` lists), ``ray.init``/``ray.shutdown`` connect
nothing (the home's controller is found by ``STEADY_HOME``), and ``ray.get``
refuses what Ray's refuses (a handle's response is not an ObjectRef: Ray says
so too). Anything else of Ray is a one-line error naming it.
"""

from __future__ import annotations

import types
from typing import Any

from steadyserve.serve import ray_alias

_initialized = False


def init(*_args: Any, **_kwargs: Any) -> None:
    """Ray's ``ray.init``: there is no cluster to join here; Serve calls reach the
    controller of ``STEADY_HOME`` (started on first use)."""
    global _initialized
    _initialized = True


def is_initialized() -> bool:
    return _initialized


def shutdown(*_args: Any, **_kwargs: Any) -> None:
    """Ray's ``ray.shutdown``: the driver lets go; applications keep running, as
    Ray's detached Serve applications do."""
    global _initialized
    _initialized = False


def get(object_refs: Any, *, timeout: float | None = None) -> Any:
    """Ray's ``ray.get`` takes ObjectRefs only, and there are none here: refused in
    Ray's words (a handle's response is read with ``.result()`` or ``await``)."""
    raise ValueError(
        f"Invalid type of object refs, {type(object_refs)}, is given. "
        "'object_refs' must either be an ObjectRef or a list of ObjectRefs. "
    )


PROVIDED = ("init", "is_initialized", "shutdown", "get")


def adopt(module: types.ModuleType) -> None:
    """Make ``module`` (``ray``, loaded from SteadyServe's ``ray.py``) the stand-in."""
    for name in PROVIDED:
        setattr(module, name, globals()[name])
    module.__path__ = []  # type: ignore[attr-defined]  # ray.serve is asked of the finder

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(
            f"ray.{attr} is not provided here: Ray is not installed, and SteadyServe's"
            f" stand-in provides only ray.serve and ray.{', ray.'.join(PROVIDED)};"
            f" see {ray_alias.DOCS}"
        )

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    finder = ray_alias.install({ray_alias.SWITCH: "steadyserve"}, say=lambda _message: None)
    finder.stand_in = True
