"""The Unix sockets isolated replicas reach by path (unix_socket.py): only the
home's owner connects, a socket left by a killed process is replaced, a path too
long for ``bind(2)`` is one clear error."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from steadyserve import unix_socket
from steadyserve.paths import Home


@pytest.fixture
def base() -> Iterator[Path]:
    """A world-traversable directory (pytest's tmp_path is under a 0700 one, which
    would keep another user out whatever the sockets' own modes)."""
    with tempfile.TemporaryDirectory(prefix="steady-sock-") as tmp:
        os.chmod(tmp, 0o755)
        yield Path(tmp)


def connect_as_nobody(path: Path) -> int:
    """The errno a connect to ``path`` gets from a forked child running as nobody (0: it
    connected). Forked: this machine's Python lives under /root, mode 0700."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            code = 0
            try:
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.connect(str(path))
            except OSError as exc:
                code = exc.errno or -1
            os.write(write_end, json.dumps(code).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        code = json.loads(answer.read() or "-1")
    os.waitpid(pid, 0)
    assert isinstance(code, int)
    return code


def test_a_socket_is_0600_in_a_0700_directory(base: Path) -> None:
    home = Home(base / "home")
    home.sockets_dir.mkdir(parents=True, mode=0o755)  # made loose by someone: tightened
    with unix_socket.bind_private(home.routes_socket) as sock:
        assert stat.S_IMODE(home.sockets_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(home.routes_socket.stat().st_mode) == 0o600
        with socket.socket(socket.AF_UNIX) as client:  # its owner connects
            client.connect(str(home.routes_socket))
            sock.accept()[0].close()
    unix_socket.remove(home.routes_socket)
    assert not home.routes_socket.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_another_local_user_cannot_connect(base: Path) -> None:
    home = Home(base / "home")
    home.root.mkdir(mode=0o755)
    path = home.call_socket("web", 1)
    with unix_socket.bind_private(path):
        assert connect_as_nobody(path) == errno.EACCES  # the 0700 directory
        os.chmod(path.parent, 0o755)
        assert connect_as_nobody(path) == errno.EACCES  # and the 0600 socket itself
        os.chmod(path, 0o666)
        assert connect_as_nobody(path) == 0  # the check above can fail: it is no accident


def test_a_stale_socket_is_replaced_and_other_files_are_not(base: Path) -> None:
    path = Home(base / "home").call_socket("web", 2)
    unix_socket.bind_private(path).close()  # a replica killed without cleaning up
    assert stat.S_ISSOCK(path.stat().st_mode)
    with unix_socket.bind_private(path) as sock, socket.socket(socket.AF_UNIX) as client:
        client.connect(str(path))
        sock.accept()[0].close()
    path.unlink()
    path.write_text("not a socket")
    with pytest.raises(OSError):
        unix_socket.bind_private(path)
    unix_socket.remove(path)
    assert path.read_text() == "not a socket"


def test_a_path_too_long_is_one_line(base: Path) -> None:
    path = base / ("d" * 120) / "routes.sock"
    with pytest.raises(unix_socket.SocketPathError) as info:
        unix_socket.bind_private(path)
    assert "too long for a Unix socket" in str(info.value) and "\n" not in str(info.value)
    assert not path.parent.exists()  # nothing made


def test_call_sockets_are_per_service_and_replica_and_short() -> None:
    home = Home(Path("/tmp/steady-test-abcdefgh/home"))
    paths = {home.call_socket(s, i) for s in ("web", "api", "x" * 200) for i in (1, 12345)}
    assert len(paths) == 6 and all(unix_socket.fits(p) for p in paths)
