"""Ray's ``runtime_env`` keys that shape a version's code and packages, checked
and mapped onto service fields (one-line errors naming the key).

- ``working_dir``: the services' ``workdir`` (local folders only: nothing is fetched);
- ``pip`` / ``uv``: ``pip:`` (a list, a requirements file in the workdir, or
  Ray's ``{packages: ...}`` mapping), installed into the version's environment;
- ``py_modules``: local package folders copied into the version's workdir copy
  (``file_mounts``), so ``import my_module`` works as on Ray; ``.whl`` files join
  ``pip``;
- ``excludes``: gitignore patterns left out when the working_dir is copied.

Every one of them sits in the services' ``ray_options`` too, so changing any is
a code change that restarts the application's replicas, as in Ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pathspec

from steadyserve.envs.plan import PipSpec, requirements_path
from steadyserve.spec.errors import SpecError

PACKAGE_KEYS = {
    "pip": ("packages", "pip_check", "pip_version", "pip_install_options"),
    "uv": ("packages", "uv_check", "uv_version", "uv_pip_install_options"),
}


def working_dir(value: object, where: str, base_dir: Path) -> Path:
    if not isinstance(value, str) or "://" in value:
        raise SpecError(where, "must be a local directory (remote URIs are not fetched here)")
    path = Path(value).expanduser()
    folder = (path if path.is_absolute() else base_dir / path).resolve()
    if not folder.is_dir():
        raise SpecError(where, f"no such directory: {folder}")
    return folder


def packages(value: object, where: str, key: str, workdir: Path, notices: list[str]) -> PipSpec:
    """``pip``/``uv`` as the spec's ``pip:``: what to install into the version's environment."""
    options: list[str] = []
    if isinstance(value, dict):
        for sub in value:
            if sub not in PACKAGE_KEYS[key]:
                known = ", ".join(PACKAGE_KEYS[key])
                raise SpecError(f"{where}.{sub}", f"unknown field (known: {known})")
        for sub in ("pip_check", "pip_version", "uv_check", "uv_version"):
            if sub in value:
                notices.append(
                    f"{where}.{sub}: does not apply here (the environment is built with"
                    " this machine's uv or pip)"
                )
        raw_options = value.get(f"{'' if key == 'pip' else 'uv_'}pip_install_options") or []
        if not isinstance(raw_options, list) or not all(isinstance(o, str) for o in raw_options):
            raise SpecError(f"{where}.{key}_install_options", "must be a list of strings")
        options = list(raw_options)
        value = value.get("packages")
        where = f"{where}.packages"
    if isinstance(value, str):
        rel = _requirements_file(value, workdir)
        if rel is None:
            raise SpecError(where, "a requirements file must be inside the working_dir")
        if options:
            raise SpecError(where, "install options need packages as a list")
        return rel
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise SpecError(where, "must be a list of requirements or a requirements file")
    return [*value, *options]


def _requirements_file(value: str, workdir: Path) -> str | None:
    path = Path(value).expanduser()
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(workdir)
        except ValueError:
            return None
    return requirements_path(path.as_posix())


def py_modules(value: object, where: str, base_dir: Path) -> tuple[dict[str, str], list[str]]:
    """(importable name -> its folder, wheels to install) for Ray's ``py_modules``."""
    if not isinstance(value, list):
        raise SpecError(where, "must be a list of local folders or .whl files")
    folders: dict[str, str] = {}
    wheels: list[str] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(item, str) or "://" in item:
            raise SpecError(at, "must be a local folder or .whl file (remote URIs are not fetched)")
        path = Path(item).expanduser()
        path = (path if path.is_absolute() else base_dir / path).resolve()
        if path.is_file() and path.suffix == ".whl":
            wheels.append(str(path))
        elif path.is_dir():
            if path.name in folders:
                raise SpecError(at, f"two py_modules are named {path.name!r}")
            folders[path.name] = str(path)
        else:
            raise SpecError(at, f"no such folder or .whl file: {path}")
    return folders, wheels


def excludes(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise SpecError(where, "must be a list of gitignore patterns")
    return list(value)


def excludes_of(ray_options: Any) -> pathspec.GitIgnoreSpec | None:
    """The working_dir patterns a service's Ray application excludes, or None."""
    app = ray_options.get("application") if isinstance(ray_options, dict) else None
    env = app.get("runtime_env") if isinstance(app, dict) else None
    patterns = env.get("excludes") if isinstance(env, dict) else None
    if not patterns:
        return None
    return pathspec.GitIgnoreSpec.from_lines(patterns)
