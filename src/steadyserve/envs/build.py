"""Build, reuse and prune per-version environments under ``$STEADY_HOME/envs``.

What to build and when is decided in :mod:`steadyserve.envs.plan`; this
module runs it. Layout::

    envs/KEY -> .KEY16-RANDOM        a symlink, created last: the environment exists
    envs/.KEY16-RANDOM/venv/         the virtualenv (built where it stays: venvs
                                     do not survive being moved)
    envs/.KEY16-RANDOM/build.log     the output of creating it, pip: and setup
    envs/.KEY16-RANDOM/outputs/      what setup added to the workdir (environment_outputs.py)
    envs/.KEY16-RANDOM/.building     locked while a build runs
    envs/.KEY.lock                   locked while a process looks up or builds KEY

An environment exists exactly when its ``KEY`` link does, and the link is made
by one atomic rename once the build succeeded, so a crash or a failed build
leaves no environment (the half-built folder is deleted at once, or by the
next prune once no process holds its lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import importlib.metadata
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import steadyserve
from steadyserve.envs import outputs as outputs
from steadyserve.envs import plan as plan
from steadyserve.envs import seal as seal
from steadyserve.home.paths import Home
from steadyserve.oneline import last_lines

log = logging.getLogger("steadyserve.controller")

ENVS_DIR = "envs"
BUILD_LOG = "build.log"
_LOCK = ".building"
_ORPHAN_AGE_S = 60.0
_LOCK_POLL_S = 0.1
_KEY_LOCK = ".lock"


class BuildError(Exception):
    """An environment could not be built or keyed; one line for the event."""


@dataclass(frozen=True)
class Environment:
    """A built environment: ``path`` is its stable name, ``envs/KEY``."""

    key: str
    path: Path

    @property
    def venv(self) -> Path:
        return self.path / "venv"

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def log(self) -> Path:
        return self.path / BUILD_LOG

    def activate(self, env: dict[str, str]) -> dict[str, str]:
        return activated(env, self.venv)


def activated(env: dict[str, str], venv: Path) -> dict[str, str]:
    """``env`` as ``source venv/bin/activate`` leaves it: VIRTUAL_ENV, PATH first."""
    out = dict(env)
    out.pop("PYTHONHOME", None)
    out["VIRTUAL_ENV"] = str(venv)
    out["PATH"] = os.pathsep.join(p for p in (str(venv / "bin"), env.get("PATH", "")) if p)
    return out


def envs_root(home: Home) -> Path:
    return home.root / ENVS_DIR


def steadyserve_source() -> str:
    """The folder ``import steadyserve`` is found in (the source tree when editable)."""
    return str(Path(steadyserve.__file__).resolve().parents[1])


@functools.lru_cache(maxsize=1)
def python_identity() -> str:
    """What the key knows of the interpreter and the packages it lends the venv
    (found once: a controller's own packages do not change while it runs)."""
    parts = [
        sys.implementation.cache_tag or sys.implementation.name,
        sys.version,
        os.path.realpath(sys.executable),
        *seal.identity(seal.lent()),
        steadyserve_source(),
    ]
    return "\n".join(parts)


def key_files(workdir: Path, pip: plan.PipSpec) -> dict[str, bytes]:
    """The dependency files at the top of ``workdir``, and ``pip:``'s requirements file."""
    found: dict[str, bytes] = {}
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(workdir), key=lambda e: e.name):
            if plan.is_dependency_file(entry.name) and entry.is_file():
                found[entry.name] = Path(entry.path).read_bytes()
    if isinstance(pip, str):
        rel = plan.requirements_path(pip)
        try:
            if rel is None:
                raise OSError
            found[rel] = (workdir / rel).read_bytes()
        except OSError:
            raise BuildError(f"pip: no requirements file {pip} in the workdir") from None
    return found


def key_for(workdir: Path, setup: str | None, pip: plan.PipSpec) -> str:
    return plan.environment_key(setup, pip, key_files(workdir, pip), python_identity())


def existing(home: Home, key: str) -> Environment | None:
    """The environment named ``key``, if it was built."""
    path = envs_root(home) / key
    env = Environment(key, path)
    return env if path.is_symlink() and os.path.exists(env.python) else None


_locks: dict[Path, asyncio.Lock] = {}


Confine = Callable[[list[str], dict[str, str], Path, Path], tuple[list[str], dict[str, str], int]]
"""How ``setup`` is run confined: given its argv, environment, working folder and
the environment's folder being built, the argv and environment to run instead
and a descriptor to pass to it (and close after; -1 for none). The local backend
runs an isolated service's setup in its replicas' sandbox so (backends/sandbox.py)."""


async def ensure(
    home: Home,
    workdir: Path,
    setup: str | None,
    pip: plan.PipSpec,
    env: dict[str, str],
    failure_log: Path | None = None,
    confine: Confine | None = None,
) -> tuple[Environment, bool]:
    """The environment for a version: reused when its key exists, else built.
    Returns it and whether it was built now. Raises BuildError, after copying
    a failed build's output to ``failure_log`` (the build itself leaves nothing)."""
    key = key_for(workdir, setup, pip)
    root = envs_root(home)
    lock = _locks.setdefault(root / key, asyncio.Lock())
    async with lock, _key_locked(root, key) as lock_path:
        found = existing(home, key)
        built = found is None
        if found is None:
            try:
                found = await _build(root, key, workdir, setup, pip, env, failure_log, confine)
            except BaseException:
                lock_path.unlink(missing_ok=True)  # a failed build leaves nothing
                raise
    await asyncio.to_thread(outputs.restore, found.path / outputs.OUTPUTS, workdir)
    return found, built


@contextlib.asynccontextmanager
async def _key_locked(root: Path, key: str) -> AsyncIterator[Path]:
    """Hold ``envs/.KEY.lock`` while the key is looked up and built: two processes
    (the controller and a CLI importing a Ray Serve application, say) that need the
    same environment at once build it once; the second reuses it. Polled, so a
    cancelled wait leaves nothing blocked behind it."""
    root.mkdir(parents=True, exist_ok=True)
    path = _key_lock(root, key)
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(_LOCK_POLL_S)
            if _still_named(fd, path):  # not unlinked by its holder meanwhile (prune)
                yield path
                return
        finally:
            os.close(fd)  # releases the lock


def _key_lock(root: Path, key: str) -> Path:
    return root / f".{key}{_KEY_LOCK}"


def _still_named(fd: int, path: Path) -> bool:
    """Whether the locked file is still the one at ``path``: a lock file is deleted
    only by who holds it, so a lock taken on a deleted one is taken again."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


async def _build(
    root: Path,
    key: str,
    workdir: Path,
    setup: str | None,
    pip: plan.PipSpec,
    env: dict[str, str],
    failure_log: Path | None,
    confine: Confine | None = None,
) -> Environment:
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=root))
    lock_fd = os.open(folder / _LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    started = time.monotonic()
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        venv = folder / "venv"
        lent = seal.lent()
        steps = plan.build_plan(
            uv=shutil.which("uv", path=env.get("PATH")),
            python=sys.executable,
            target=str(venv),
            pip=pip,
            lends_pip=any(seal.canonical(d.metadata["Name"] or "") == "pip" for d in lent),
        )
        inside = activated(env, venv)
        with open(folder / BUILD_LOG, "wb") as out:
            out.write(f"--- building environment {key[:16]} with {steps.tool} ---\n".encode())
            out.flush()
            await _step("creating the virtualenv", steps.create, workdir, env, out, folder)
            sealed_at = time.monotonic()
            site = _seal(venv, lent, steps.tool)
            out.write(
                f"--- linked SteadyServe and its {len(lent)} packages in"
                f" {time.monotonic() - sealed_at:.2f}s ---\n".encode()
            )
            out.flush()
            if steps.install is not None:
                await _step("pip", steps.install, workdir, inside, out, folder)
            if setup:
                out.write(b"--- setup ---\n")
                out.flush()
                before = await asyncio.to_thread(outputs.listing, workdir)
                argv, setup_env, fd = ["bash", "-c", setup], inside, -1
                if confine is not None:
                    argv, setup_env, fd = confine(argv, inside, workdir, folder)
                try:
                    await _step("setup", argv, workdir, setup_env, out, folder, fd)
                finally:
                    if fd >= 0:
                        os.close(fd)
                await asyncio.to_thread(outputs.keep, workdir, before, folder / outputs.OUTPUTS)
            conflict = seal.conflict_line(seal.unmet(site))
            if conflict is not None:
                out.write(f"--- conflict: {conflict}\n".encode())
                log.warning("environment %s: %s", key[:16], conflict)
        seconds = time.monotonic() - started
        meta = {
            "key": key,
            "tool": steps.tool,
            "built_at": time.time(),
            "seconds": seconds,
            "conflict": conflict,
        }
        (folder / "environment.json").write_text(json.dumps(meta))
        link = root / key
        staging = root / f".{key}.link-{os.getpid()}"
        staging.unlink(missing_ok=True)
        os.symlink(folder.name, staging)
        os.rename(staging, link)
        log.info("built environment %s with %s in %.1fs", key[:16], steps.tool, seconds)
        return Environment(key, link)
    except BaseException:
        if failure_log is not None:
            with contextlib.suppress(OSError):
                shutil.copyfile(folder / BUILD_LOG, failure_log)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.close(lock_fd)


async def _step(
    what: str,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    out: BinaryIO,
    folder: Path,
    pass_fd: int = -1,
) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(pass_fd,) if pass_fd >= 0 else (),
        )
    except OSError as exc:
        raise BuildError(f"{what}: cannot run {argv[0]}: {exc.strerror}") from None
    try:
        code = await proc.wait()
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    if code != 0:
        output = (folder / BUILD_LOG).read_text(encoding="utf-8", errors="replace")
        raise BuildError(f"{what} exited with code {code}: {last_lines(output)}")


def _seal(venv: Path, lent: list[importlib.metadata.Distribution], tool: str) -> Path:
    """Install SteadyServe's closure into the venv (seal.py) and give the venv a
    ``pip`` command that installs into it; return its ``site-packages``."""
    (site,) = venv.glob("lib/python*/site-packages")
    seal.link_in(lent, site)
    bin_dir = venv / "bin"
    has_pip = (site / "pip").is_dir()
    uv = shutil.which("uv") if tool == "uv" else None
    if has_pip:
        body = 'exec "$(dirname "$0")/python" -m pip "$@"'
    elif uv is not None:
        body = f'exec {uv!r} pip "$@" --python "$(dirname "$0")/python"'
    else:
        return site
    for name in ("pip", "pip3"):
        shim = bin_dir / name
        if not shim.exists():
            shim.write_text(f"#!/bin/sh\n{body}\n")
            shim.chmod(0o755)
    return site


def keys_on_disk(home: Home) -> list[str]:
    try:
        return [e.name for e in os.scandir(envs_root(home)) if not e.name.startswith(".")]
    except FileNotFoundError:
        return []


def prune(home: Home, in_use: Iterable[str]) -> list[str]:
    """Delete every environment no kept version uses, and folders of builds that
    died; return the keys deleted."""
    root = envs_root(home)
    doomed = plan.unused(keys_on_disk(home), in_use)
    for key in doomed:
        link = root / key
        target = root / os.readlink(link) if link.is_symlink() else link
        link.unlink(missing_ok=True)  # first: the environment stops existing at once
        shutil.rmtree(target, ignore_errors=True)
    linked = set()
    for key in keys_on_disk(home):
        with contextlib.suppress(OSError):
            linked.add(os.readlink(root / key))
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(root):
            hidden = entry.name.startswith(".") and entry.name not in linked
            if hidden and entry.is_dir() and _abandoned(Path(entry.path)):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif hidden and entry.name.endswith(_KEY_LOCK) and not _has_key(root, entry.name):
                _drop_lock(Path(entry.path))
    return doomed


def _has_key(root: Path, lock_name: str) -> bool:
    return (root / lock_name[1:].removesuffix(_KEY_LOCK)).exists()


def _drop_lock(path: Path) -> None:
    """Delete the lock file of a key that no longer exists, unless a process holds it."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _still_named(fd, path):
            path.unlink()
    except OSError:
        return
    finally:
        os.close(fd)


def _abandoned(folder: Path) -> bool:
    """A build folder no live build holds (its builder failed or died) and that is
    old: a builder creates its folder, then its lock file, then takes the lock, so
    a young folder with a free lock may be one whose builder is between the two
    (a prune there deleted a build starting beside it: CI, tests/e2e/test_pools.py)."""
    try:
        if time.time() - folder.stat().st_mtime <= _ORPHAN_AGE_S:
            return False
        fd = os.open(folder / _LOCK, os.O_RDWR)
    except FileNotFoundError:  # never locked, and old: a leftover
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def prune_unused(home: Home, kept: list[tuple[Path, str | None, plan.PipSpec]]) -> list[str]:
    """Delete the environments none of ``kept`` (what each kept version needs) uses."""
    in_use = set()
    for workdir, setup, pip in kept:
        with contextlib.suppress(BuildError):  # its requirements file is gone: nothing to keep
            in_use.add(key_for(workdir, setup, pip))
    return prune(home, in_use)
