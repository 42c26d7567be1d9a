"""SkyPilot's ``file_mounts`` with local sources: copied into the version's workdir.

On a cloud, SkyPilot copies each local source to its path on the replica's VM.
Here every replica runs in a copy of the workdir, so each source goes into that
copy instead, at its destination made relative (``/data/model`` -> ``data/model``,
``~/cache`` -> ``cache``; spec/skypilot.py :func:`mount_destination`). The CLI
stages workdir plus mounts in a temporary folder and sends that as the workdir,
so the controller's snapshot, content hash and change detection see one tree.
Ray's ``runtime_env.py_modules`` arrive here as mounts, and its ``excludes`` are
left out of that copy (compat/ray_runtime_env.py).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pathspec

from steadyserve.compat.ray_runtime_env import excludes_of
from steadyserve.spec import ServiceSpec, SpecError
from steadyserve.spec.mounts import mount_destination


@contextmanager
def staged(spec: ServiceSpec, skip: Path | None = None) -> Iterator[ServiceSpec]:
    """``spec`` whose workdir holds the mounts too, while the block runs (the
    controller copies it during the request); the spec itself without mounts.
    ``skip`` (the service file) is left out of the copy, as the snapshot would."""
    excluded = excludes_of(spec.ray_options)
    if not spec.file_mounts and excluded is None:
        yield spec
        return
    stage = Path(tempfile.mkdtemp(prefix="steady-mounts-"))
    try:
        if spec.workdir is not None:
            ignore = _skip_file(skip, Path(spec.workdir), excluded)
            shutil.copytree(spec.workdir, stage, symlinks=True, dirs_exist_ok=True, ignore=ignore)
        for dest, source in spec.file_mounts.items():
            target = stage / mount_destination(dest)
            try:
                if Path(source).is_dir():
                    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target)
            except OSError as exc:
                raise SpecError(
                    f"file_mounts.{dest}", f"cannot copy {source}: {exc.strerror or exc}"
                ) from None
        yield spec.model_copy(update={"workdir": str(stage)})
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _skip_file(
    skip: Path | None, root: Path, excluded: pathspec.GitIgnoreSpec | None = None
) -> Callable[[str, list[str]], set[str]] | None:
    """What the copy leaves out: the service file, and paths ``excluded`` matches
    (gitignore rules, relative to the workdir: ``build/`` only folders)."""
    if skip is None and excluded is None:
        return None
    skip = skip.resolve() if skip is not None else None
    root = root.resolve()

    def ignore(folder: str, names: list[str]) -> set[str]:
        left_out = set()
        for name in names:
            path = Path(folder) / name
            if skip is not None and path.resolve() == skip:
                left_out.add(name)
            elif excluded is not None:
                rel = path.relative_to(root).as_posix() + ("/" if path.is_dir() else "")
                if excluded.match_file(rel):
                    left_out.add(name)
        return left_out

    return ignore
