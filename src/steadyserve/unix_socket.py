"""Unix-domain sockets under the home: how an isolated replica reaches what it may.

A replica in its own network namespace (``service.isolation: network``) has no
way to the host's loopback, but it shares the file system, and a path-based
Unix socket is reached by its path from any network namespace (an abstract one
is not: it belongs to the namespace it was made in). So the controller's
routes-only endpoint and every Python replica's app server also listen on a
socket file in ``<home>/sockets`` (docs/isolation.md).

What guards them is the file system: the directory is 0700 and each socket 0600,
so only the home's owner connects (the home itself is 0700 too).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

MAX_PATH = 107
"""The longest path ``bind(2)`` takes (``sun_path`` is 108 bytes with its NUL)."""


class SocketPathError(OSError):
    """The path cannot be a Unix socket here (too long); one line."""


def fits(path: Path) -> bool:
    return len(os.fsencode(str(path))) <= MAX_PATH


def private_dir(path: Path) -> None:
    """``path`` as a directory only its owner enters (0700, even if it existed)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def bind_private(path: Path, backlog: int = 1024) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600 in a 0700 directory.

    A socket file left by a process that died (SIGKILL) is replaced; anything
    else at the path is an error. The socket is bound with umask 0177, so it is
    never connectable by others, not even between ``bind`` and ``chmod``."""
    if not fits(path):
        raise SocketPathError(f"{path}: longer than {MAX_PATH} bytes, too long for a Unix socket")
    private_dir(path.parent)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def remove(path: Path) -> None:
    """Delete the socket file at ``path`` if one is there (never another kind of file)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
