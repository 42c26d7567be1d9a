"""Where replicas run: ``local`` (this machine, the default), ``ray`` (an existing
Ray cluster) or ``fake`` (tests of the controller). Chosen once per controller
from ``STEADY_BACKEND`` and ``STEADY_RAY_ADDRESS`` (``steady controller start
--backend ray --ray-address ...`` sets them)."""

from __future__ import annotations

import os

from steadyserve.backends.base import Backend
from steadyserve.home.paths import Home

BACKEND_ENV = "STEADY_BACKEND"
RAY_ADDRESS_ENV = "STEADY_RAY_ADDRESS"
NAMES = ("local", "ray")


class BackendChoiceError(Exception):
    """The backend asked for cannot be used here; one line saying what to do."""


def backend_name(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    name = env.get(BACKEND_ENV) or "local"
    if name not in (*NAMES, "fake"):
        raise BackendChoiceError(f"{BACKEND_ENV}: unknown backend {name!r} (use local or ray)")
    return name


def choose_backend(home: Home) -> Backend:
    """The backend this controller runs replicas on, or BackendChoiceError."""
    name = backend_name()
    if name == "fake":
        from steadyserve.backends.fake import FakeBackend

        return FakeBackend(home)
    if name == "ray":
        from steadyserve.backends.ray import BackendUnavailable, RayBackend

        try:
            return RayBackend(home, os.environ.get(RAY_ADDRESS_ENV) or "auto")
        except BackendUnavailable as exc:
            raise BackendChoiceError(str(exc)) from None
    from steadyserve.backends.local import LocalBackend

    return LocalBackend(home)
