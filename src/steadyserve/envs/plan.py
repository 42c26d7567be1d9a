"""Per-version environments: which versions need one, and which one they share.

A version whose ``setup`` or ``pip`` may install packages gets its own
virtualenv, so a new version's ``pip install`` never changes the packages that
older replicas (or a later rollback) run with. Building one costs seconds to
minutes, so versions share it whenever what goes into it is identical: the
environment is named by a content key over everything that decides its
packages. An in-place update, or a code change that leaves ``setup``, ``pip``
and the dependency files alone, reuses the environment and builds nothing.

This module is pure (no I/O): the key, the commands a build runs and the
choice of what to delete. :mod:`steadyserve.envs.build` carries them out.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

PipSpec = list[str] | str | None
"""The spec's ``pip``: requirement specifiers, or a requirements file in the workdir."""

DEPENDENCY_PATTERNS = (
    "requirements*.txt",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "uv.lock",
    "poetry.lock",
)
"""Files at the top of a workdir that ``setup`` may install from: part of the key."""

KEY_VERSION = "steady-env-2"
"""Mixed into every key: a change of how environments are built renames them all."""


def needs_environment(setup: str | None, pip: PipSpec) -> bool:
    """A version gets its own virtualenv when ``setup`` or ``pip`` may install
    packages; one with neither runs in the controller's interpreter (no cost)."""
    return bool(setup and setup.strip()) or bool(pip)


WORKERS_RUN_SETUP = "# a pool's workers run setup, each (controller/replica_env.py)"
"""What a pool's version builds its shared virtualenv with instead of ``setup``:
the environment (and ``pip:``) is built once, ``setup`` runs on every worker."""


def built_setup(setup: str | None, pool: bool) -> str | None:
    """The ``setup`` a version's environment is built (and named) with: its own, or
    for a pool, whose workers each run it, :data:`WORKERS_RUN_SETUP` (so the
    environment is still made, and ``setup``'s installs go into it, not the host's)."""
    if pool and setup and setup.strip():
        return WORKERS_RUN_SETUP
    return setup


def is_dependency_file(name: str) -> bool:
    """Whether a top-level workdir file is one that ``setup`` may install from."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in DEPENDENCY_PATTERNS)


def requirements_path(pip: str) -> str | None:
    """The workdir-relative path a ``pip:`` string names, or None when it would
    leave the workdir (absolute, or through ``..``)."""
    path = PurePosixPath(pip.strip())
    if not pip.strip() or path.is_absolute() or ".." in path.parts:
        return None
    return path.as_posix()


def environment_key(
    setup: str | None,
    pip: PipSpec,
    files: Mapping[str, bytes],
    python: str,
) -> str:
    """The content key of an environment: SHA-256 over ``setup``'s text, the
    ``pip`` list (or the requirements file's name; its bytes come in ``files``),
    every dependency file's name and bytes, and the interpreter it is built on.

    ``files`` maps workdir-relative names to contents: the top-level dependency
    files and a ``pip:`` requirements file. The workdir's other files (the code)
    are not part of the key: changing code alone reuses the environment.
    """
    digest = hashlib.sha256()

    def part(label: str, data: bytes) -> None:
        digest.update(label.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)

    part("version", KEY_VERSION.encode())
    part("python", python.encode())
    part("setup", (setup or "").encode())
    part("pip", json.dumps(pip, sort_keys=True).encode())
    for name in sorted(files):
        part("file:" + name, files[name])
    return digest.hexdigest()


@dataclass(frozen=True)
class BuildPlan:
    """The commands that build one environment, in order (each an argv)."""

    create: list[str]
    install: list[str] | None
    """Installs ``pip:``; None when the spec has none."""
    tool: str
    """``uv`` or ``pip``: what the event and the log say built it."""


def build_plan(
    *,
    uv: str | None,
    python: str,
    target: str,
    pip: PipSpec,
    lends_pip: bool,
) -> BuildPlan:
    """How to build a virtualenv at ``target`` for ``python`` and install ``pip:``.

    With ``uv`` (its path, when on PATH): ``uv venv`` and ``uv pip install``,
    much faster. Otherwise ``python -m venv`` and the venv's ``python -m pip``;
    the venv is made without its own pip when the controller lends it its pip
    (seal.py links it in before ``pip:`` runs), which saves seconds.
    """
    venv_python = f"{target}/bin/python"
    reqs: list[str] = []
    if isinstance(pip, str):
        reqs = ["-r", pip]
    elif pip:
        reqs = list(pip)
    if uv is not None:
        create = [uv, "venv", "--quiet", "--python", python, target]
        install = [uv, "pip", "install", "--python", venv_python, *reqs] if reqs else None
        return BuildPlan(create, install, "uv")
    create = [python, "-m", "venv", *(["--without-pip"] if lends_pip else []), target]
    install = (
        [venv_python, "-m", "pip", "install", "--disable-pip-version-check", *reqs]
        if reqs
        else None
    )
    return BuildPlan(create, install, "pip")


def unused(on_disk: Iterable[str], in_use: Iterable[str]) -> list[str]:
    """The environments no kept version refers to: what pruning deletes."""
    keep = set(in_use)
    return sorted(key for key in on_disk if key not in keep)
