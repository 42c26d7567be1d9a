"""Where replicas run: ``local`` (this machine, the default), ``ray`` (an existing
Ray cluster) or ``fake`` (tests of the controller). Chosen once per controller
from ``STEADY_BACKEND`` and ``STEADY_RAY_ADDRESS`` (``steady controller start
--backend ray --ray-address ...`` sets them)."""

from __future__ import annotations

import os
from collections.abc import Callable

from steadyserve.backends.base import Backend
from steadyserve.home.paths import Home

BACKEND_ENV = "STEADY_BACKEND"
RAY_ADDRESS_ENV = "STEADY_RAY_ADDRESS"


class BackendChoiceError(Exception):
    """The backend asked for cannot be used here; one line saying what to do."""


# Each backend's module is imported only when it is chosen: Ray's is heavy.
def _local(home: Home) -> Backend:
    from steadyserve.backends.local import LocalBackend

    return LocalBackend(home)


def _ray(home: Home) -> Backend:
    from steadyserve.backends.ray import BackendUnavailable, RayBackend

    try:
        return RayBackend(home, os.environ.get(RAY_ADDRESS_ENV) or "auto")
    except BackendUnavailable as exc:
        raise BackendChoiceError(str(exc)) from None


def _fake(home: Home) -> Backend:
    from steadyserve.backends.fake import FakeBackend

    return FakeBackend(home)


BACKENDS: dict[str, Callable[[Home], Backend]] = {"local": _local, "ray": _ray, "fake": _fake}
"""Every backend by its ``STEADY_BACKEND`` name: a new backend is one module and one
line here."""
NAMES = tuple(name for name in BACKENDS if name != "fake")
"""The names users are offered (``fake`` is for the controller's own tests)."""


def backend_name(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    name = env.get(BACKEND_ENV) or "local"
    if name not in BACKENDS:
        choices = " or ".join(NAMES)
        raise BackendChoiceError(f"{BACKEND_ENV}: unknown backend {name!r} (use {choices})")
    return name


def choose_backend(home: Home) -> Backend:
    """The backend this controller runs replicas on, or BackendChoiceError."""
    return BACKENDS[backend_name()](home)
