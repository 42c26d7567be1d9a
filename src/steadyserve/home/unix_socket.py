"""Unix-domain sockets under the home: how an isolated replica reaches what it may.

A replica in its own network namespace (``service.isolation: network``) has no
way to the host's loopback, but it shares the file system, and a path-based
Unix socket is reached by its path from any network namespace (an abstract one
is not: it belongs to the namespace it was made in). So the controller's
routes-only endpoint and every Python replica's app server also listen on a
socket file in ``<home>/sockets`` (docs/isolation.md).

What guards them is the file system: the directory is 0700 and each socket 0600,
so only the home's owner connects (the home itself is 0700 too). A directory
someone else owns, or a symlink in its place, is refused: its owner could swap
our sockets for theirs and collect the tokens sent to them.

``sun_path`` holds 107 bytes, far less than a home's path may be. So a socket is
bound, and a long path connected, through its directory's file descriptor:
``/proc/self/fd/N/<name>`` is short whatever the directory's path, the kernel
resolves it to the same directory (on Linux), and the file is the same one a
short path would name, so nothing else (modes, cleanup, the namespaces that
share the file system) changes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
from pathlib import Path

MAX_PATH = 107
"""The longest path ``bind(2)`` takes (``sun_path`` is 108 bytes with its NUL)."""

PROC_FD = Path("/proc/self/fd")


class SocketPathError(OSError):
    """The path cannot be a Unix socket here (too long, or an unsafe directory); one line."""


def fits(path: Path) -> bool:
    return len(os.fsencode(str(path))) <= MAX_PATH


FD_DIGITS = 10
"""Room kept for the descriptor's number in ``/proc/self/fd/N/``."""


def _alias_fits(name: str) -> bool:
    return len(os.fsencode(f"{PROC_FD}/{'9' * FD_DIGITS}/{name}")) <= MAX_PATH


def bindable(path: Path) -> bool:
    """Whether ``bind_private`` can bind at ``path``: it fits ``sun_path``, or its name
    does after ``/proc/self/fd/N/`` (Linux)."""
    return fits(path) or (PROC_FD.is_dir() and _alias_fits(path.name))


def _too_long(path: Path) -> SocketPathError:
    return SocketPathError(
        f"{path}: too long for a Unix socket (its name must fit {MAX_PATH} bytes after"
        " /proc/self/fd/N/, and a directory past that needs /proc)"
    )


def _owned(path: Path, info: os.stat_result) -> None:
    """Refuse a socket directory that is not a directory of this user's."""
    if not stat.S_ISDIR(info.st_mode):
        raise SocketPathError(f"{path}: not a directory (a symlink is refused)")
    if info.st_uid != os.geteuid():
        raise SocketPathError(
            f"{path}: owned by uid {info.st_uid}, not by this user ({os.geteuid()}): refused"
        )


def _open_private_dir(path: Path) -> int:
    """A descriptor of ``path`` as a directory only its owner enters (0700, even if
    it existed); refused if it is a symlink or another user's."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SocketPathError(f"{path}: not a directory (a symlink is refused): {exc}") from None
    try:
        _owned(path, os.fstat(fd))
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_dir(path: Path) -> None:
    """``path`` as a directory only its owner enters (0700, even if it existed)."""
    os.close(_open_private_dir(path))


def bind_private(path: Path, backlog: int = 1024) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600 in a 0700 directory.

    Bound through the directory's descriptor (where /proc is), so a long path
    binds and the directory checked is the one bound in. A socket file left by a
    process that died (SIGKILL) is replaced; anything else at the path is an
    error. The socket is bound with umask 0177, so it is never connectable by
    others, not even between ``bind`` and ``chmod``."""
    if not bindable(path):
        raise _too_long(path)  # before anything is made
    via_fd = PROC_FD.is_dir() and _alias_fits(path.name)
    fd = _open_private_dir(path.parent)
    try:
        name = path.name
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(name, dir_fd=fd).st_mode):
                os.unlink(name, dir_fd=fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(f"{PROC_FD}/{fd}/{name}" if via_fd else str(path))
            os.chmod(name, 0o600, dir_fd=fd)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
    finally:
        os.close(fd)
    return sock


class _Directories:
    """One ``O_PATH`` descriptor per long socket directory this process connects
    into, kept open: a long path is connected as ``/proc/self/fd/N/<name>``.
    Checked against the path at each use, so a directory made anew is opened anew."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def fd(self, directory: Path) -> int:
        key = str(directory)
        now = os.lstat(directory)
        _owned(directory, now)
        with self._lock:
            fd = self._fds.get(key)
            if fd is not None:
                held = os.fstat(fd)
                if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                    return fd
                os.close(fd)
                del self._fds[key]
            flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(directory, flags)
            self._fds[key] = fd
            return fd


_DIRECTORIES = _Directories()


def address(path: Path | str) -> str:
    """What to ``connect(2)`` to for the socket at ``path``: the path itself when it
    fits ``sun_path``, else the same file through its directory's descriptor.
    Raises OSError when its directory is missing, a symlink or another user's
    (whoever owns it could listen in our place)."""
    path = Path(path)
    if fits(path):
        _owned(path.parent, os.lstat(path.parent))
        return str(path)
    if not bindable(path):
        raise _too_long(path)
    return f"{PROC_FD}/{_DIRECTORIES.fd(path.parent)}/{path.name}"


def remove(path: Path) -> None:
    """Delete the socket file at ``path`` if one is there (never another kind of file)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
