"""The Unix sockets isolated replicas reach by path (unix_socket.py): only the
home's owner connects, a socket left by a killed process is replaced, a home's
path longer than ``sun_path`` still binds and connects, a directory another user
made (or a symlink in its place) is refused, a name too long is one clear error."""

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

from steadyserve.home import unix_socket
from steadyserve.home.paths import Home


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


def test_a_long_home_binds_and_connects(base: Path) -> None:
    home = Home(base / ("d" * 120) / "home")
    path = home.call_socket("web", 3)
    assert len(str(path)) > 108 and unix_socket.bindable(path)
    with unix_socket.bind_private(path) as sock, socket.socket(socket.AF_UNIX) as client:
        assert stat.S_ISSOCK(path.stat().st_mode)  # the file is where a short path puts it
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(home.sockets_dir.stat().st_mode) == 0o700
        client.connect(unix_socket.address(path))
        sock.accept()[0].close()
    unix_socket.bind_private(path).close()  # left by a killed process: replaced
    unix_socket.bind_private(path).close()
    unix_socket.remove(path)
    assert list(home.sockets_dir.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
@pytest.mark.parametrize("long", [False, True])
def test_a_directory_another_user_made_is_refused(base: Path, long: bool) -> None:
    """Its owner could swap our socket for theirs and read the tokens sent to it."""
    home = Home(base / ("d" * 120 if long else "h") / "home")
    home.sockets_dir.mkdir(parents=True)
    os.chown(home.sockets_dir, 65534, 65534)
    os.chmod(home.sockets_dir, 0o777)
    path = home.call_socket("web", 1)
    with pytest.raises(unix_socket.SocketPathError) as info:
        unix_socket.bind_private(path)
    assert "owned by uid 65534" in str(info.value) and "\n" not in str(info.value)
    assert stat.S_IMODE(home.sockets_dir.stat().st_mode) == 0o777  # left as it was
    assert list(home.sockets_dir.iterdir()) == []
    with pytest.raises(unix_socket.SocketPathError):
        unix_socket.address(path)  # nor connected into


@pytest.mark.parametrize("long", [False, True])
def test_a_symlink_in_place_of_the_directory_is_refused(base: Path, long: bool) -> None:
    home = Home(base / ("d" * 120 if long else "h") / "home")
    elsewhere = base / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    home.root.mkdir(parents=True)
    home.sockets_dir.symlink_to(elsewhere)
    path = home.call_socket("web", 1)
    with pytest.raises(unix_socket.SocketPathError) as info:
        unix_socket.bind_private(path)
    assert "symlink" in str(info.value) and "\n" not in str(info.value)
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(unix_socket.SocketPathError):
        unix_socket.address(path)


def test_a_name_too_long_is_one_line(base: Path) -> None:
    path = base / "d" / ("s" * 100 + ".sock")
    assert not unix_socket.bindable(path)
    with pytest.raises(unix_socket.SocketPathError) as info:
        unix_socket.bind_private(path)
    assert "too long for a Unix socket" in str(info.value) and "\n" not in str(info.value)
    assert not path.parent.exists()  # nothing made


def test_call_sockets_are_per_service_and_replica_and_short() -> None:
    home = Home(Path("/tmp/steady-test-abcdefgh/home"))
    paths = {home.call_socket(s, i) for s in ("web", "api", "x" * 200) for i in (1, 12345)}
    assert len(paths) == 6 and all(unix_socket.fits(p) for p in paths)
