"""Per-version snapshots of ``workdir``, with a content hash.

The hash is what an update compares: a workdir whose files did not change is
not a reason to restart replicas (SkyServe restarts on any workdir). Two kinds
of file are not part of the code: the service or fleet files of the service
(users keep them beside the code and edit them to change ``user_config``: the
caller names them, envs/manifest.py keeps which), and
whatever ``.skyignore`` and ``.steadyignore`` list (gitignore rules through
``pathspec``, negation included, as SkyPilot reads ``.skyignore``: a SkyServe
workdir leaves out here what it leaves out on a cloud), and ``__pycache__`` folders.

A snapshot holds directories, regular files and symlinks only (``rsync -a``
without devices and specials): a device, FIFO or socket is refused by name, as
are workdirs that are ``/``, the home directory or hold ``STEADY_HOME``, and any
workdir over the size limit; the walk stops at the first of these, so a bad
workdir is never read in full. Regular files are stored once per service in a
content-addressed store (``objects/``) and hard-linked into each version, so
versions share unchanged files and an in-place update writes no file bytes.
Shared files are read-only: a replica that rewrote one would change every
version holding it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

IGNORE_FILE = ".steadyignore"
IGNORE_FILES = (".skyignore", IGNORE_FILE)
"""Read in this order, so a ``.steadyignore`` line (``!keep.txt``) can re-include
what ``.skyignore`` left out."""
ALWAYS_IGNORED = ("__pycache__",)
"""Python's byte-code caches: derived from the code, and written by the replicas
into their version's copy, so a rollback (which copies that copy) would
otherwise count as a code change and an in-place update after it as a restart."""
MAX_BYTES_ENV = "STEADY_WORKDIR_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
"""1 GiB: a workdir is code and small assets; models belong in file_mounts or a cache."""
_BLOCK = 1 << 20


class WorkdirError(ValueError):
    """A workdir that cannot be snapshotted: one line naming the path (bad input)."""


def max_bytes_from_env() -> int:
    """The size limit: ``STEADY_WORKDIR_MAX_BYTES`` (bytes, > 0), else 1 GiB."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise WorkdirError(f"{MAX_BYTES_ENV}: must be a positive number of bytes, not {raw!r}")
    return value


def check_root(source: Path, steady_home: Path | None) -> None:
    """Refuse workdirs that would copy a whole system, a home, or the snapshots themselves."""
    resolved = source.resolve()
    if resolved == Path(resolved.anchor):
        raise WorkdirError(f"workdir: {source} is the filesystem root; point it at your code")
    with contextlib.suppress(RuntimeError):
        if resolved == Path.home().resolve():
            raise WorkdirError(
                f"workdir: {source} is the home directory; point it at your code's folder"
            )
    if steady_home is not None:
        home = steady_home.resolve()
        if resolved == home or resolved in home.parents:
            raise WorkdirError(
                f"workdir: {source} holds STEADY_HOME ({home}); a snapshot would copy itself"
            )


def _patterns(root: Path) -> pathspec.GitIgnoreSpec:
    lines: list[str] = [f"{name}/" for name in ALWAYS_IGNORED]
    for name in IGNORE_FILES:
        try:
            lines.extend((root / name).read_text(encoding="utf-8").splitlines())
        except (OSError, UnicodeDecodeError):
            continue
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(rel: str, is_dir: bool, patterns: pathspec.GitIgnoreSpec, exclude: set[str]) -> bool:
    """Gitignore's rules: ``build/`` matches folders only (hence the slash), and a
    folder left out is not walked, so nothing inside it can be re-included (as git)."""
    if rel in exclude:
        return True
    return patterns.match_file(f"{rel}/" if is_dir else rel)


def relative_excludes(root: Path | None, files: Iterable[str | Path]) -> set[str]:
    """The given files that lie inside ``root``, as relative paths."""
    if root is None:
        return set()
    found = set()
    for file in files:
        try:
            found.add(Path(file).resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            continue
    return found


@dataclass(frozen=True)
class Entry:
    """One thing a snapshot holds, in hashing order (parents before children)."""

    rel: str
    kind: str
    """``dir``, ``file`` or ``link``."""
    executable: bool = False
    link: str = ""
    """For a link: its target as stored (see :func:`link_target`)."""


_SPECIAL = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
)


def link_target(root: Path, rel: str, target: str) -> str:
    """Where a symlink points in a snapshot: it resolves where it did in the source.

    Judged by the link's text (not by following it): a link to a path inside the
    workdir is stored relative, so it points at the snapshot's own copy; a link
    to a path outside is stored as that absolute path (a relative ``../x`` would
    dangle once the snapshot lives elsewhere). What it points at outside is not
    copied. The rule is idempotent, so a snapshot hashes like its source.
    """
    base = os.path.join(os.path.abspath(root), os.path.dirname(rel))
    absolute = os.path.normpath(os.path.join(base, target))
    for top in dict.fromkeys((os.path.abspath(root), os.path.realpath(root))):
        if absolute == top or absolute.startswith(top.rstrip("/") + "/"):
            return os.path.relpath(absolute, os.path.join(top, os.path.dirname(rel)))
    return absolute


def scan(root: Path, exclude: set[str] | None = None, max_bytes: int | None = None) -> list[Entry]:
    """What a snapshot of ``root`` holds; raise WorkdirError on the first bad entry."""
    patterns = _patterns(root)
    entries: list[Entry] = []
    total = 0

    def walk(directory: Path) -> Iterator[Entry]:
        nonlocal total
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise WorkdirError(f"workdir: cannot read {directory}: {exc.strerror}") from exc
        subdirs: list[tuple[str, Path]] = []
        for name in names:
            path = directory / name
            rel = path.relative_to(root).as_posix()
            try:
                info = os.lstat(path)
            except OSError as exc:
                raise WorkdirError(f"workdir: cannot read {path}: {exc.strerror}") from exc
            mode, size = info.st_mode, info.st_size
            if _ignored(rel, stat.S_ISDIR(mode), patterns, exclude or set()):
                continue
            if stat.S_ISDIR(mode):
                subdirs.append((rel, path))
            elif stat.S_ISLNK(mode):
                yield Entry(rel, "link", link=link_target(root, rel, os.readlink(path)))
            elif stat.S_ISREG(mode):
                total += size
                if max_bytes is not None and total > max_bytes:
                    raise WorkdirError(
                        f"workdir: {root} holds more than {max_bytes} bytes "
                        f"({MAX_BYTES_ENV}); list large files in {IGNORE_FILE}"
                    )
                yield Entry(rel, "file", executable=bool(mode & 0o111))
            else:
                kind = next((k for test, k in _SPECIAL if test(mode)), "special file")
                raise WorkdirError(
                    f"workdir: {path} is a {kind}; a workdir holds only files, directories "
                    f"and symlinks (list it in {IGNORE_FILE})"
                )
        for rel, path in subdirs:
            yield Entry(rel, "dir")
            yield from walk(path)

    entries.extend(walk(root))
    return entries


def hash_entries(root: Path, entries: list[Entry]) -> str:
    digest = hashlib.sha256()
    for entry in entries:
        if entry.kind == "dir":
            continue
        digest.update(entry.rel.encode() + b"\0")
        if entry.kind == "link":
            digest.update(b"L" + entry.link.encode())
            continue
        digest.update(b"X" if entry.executable else b"F")
        with open(root / entry.rel, "rb") as handle:
            for block in iter(lambda: handle.read(_BLOCK), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def content_hash(root: Path, exclude: set[str] | None = None, max_bytes: int | None = None) -> str:
    """SHA-256 over every kept file's relative path, executable bit and bytes, and
    every symlink's stored target (empty directories do not count)."""
    return hash_entries(root, scan(root, exclude, max_bytes))


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _store_object(objects: Path, source: Path, executable: bool) -> Path:
    """The store's copy of ``source``: found by content, or copied in (named by what
    was actually written, so a file changing mid-copy cannot poison the store)."""
    suffix = ".x" if executable else ""
    found = objects / (_file_digest(source) + suffix)
    if found.exists():
        return found
    objects.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".in-", dir=objects)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as handle:
            for block in iter(lambda: handle.read(_BLOCK), b""):
                digest.update(block)
                out.write(block)
        shutil.copystat(source, tmp_name)
        os.chmod(tmp_name, 0o555 if executable else 0o444)
        final = objects / (digest.hexdigest() + suffix)
        if final.exists():
            os.unlink(tmp_name)
        else:
            os.rename(tmp_name, final)
        return final
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def snapshot(
    source: Path | None,
    dest: Path,
    exclude: set[str] | None = None,
    *,
    objects: Path,
    max_bytes: int | None = None,
    expected_hash: str | None = None,
) -> str | None:
    """Copy ``source`` (less what is excluded) to ``dest``; return the stored tree's hash.

    The copy is built in a private temporary folder beside ``dest`` and renamed
    into place only once complete and hashed; with ``expected_hash`` a stored
    tree that differs (the source changed while being copied) is an error and
    nothing is left behind. ``dest`` must not exist.
    """
    entries = scan(source, exclude, max_bytes) if source is not None else []
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() or dest.is_symlink():
        raise FileExistsError(f"snapshot destination already exists: {dest}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for entry in entries:
            target = tmp / entry.rel
            assert source is not None
            if entry.kind == "dir":
                target.mkdir()
            elif entry.kind == "link":
                os.symlink(entry.link, target)
            else:
                os.link(_store_object(objects, source / entry.rel, entry.executable), target)
        stored = hash_entries(tmp, scan(tmp)) if source is not None else None
        if expected_hash is not None and stored != expected_hash:
            raise WorkdirError(
                f"workdir: {source} changed while it was being copied; run the command again"
            )
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return stored


def remove_snapshot(path: Path) -> None:
    """Delete one version's files (links into the store; see :func:`collect_garbage`)."""
    shutil.rmtree(path, ignore_errors=True)


def collect_garbage(objects: Path) -> int:
    """Delete stored files no snapshot links to any more; return how many."""
    removed = 0
    try:
        names = os.listdir(objects)
    except FileNotFoundError:
        return 0
    for name in names:
        path = objects / name
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink <= 1:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
