"""The sandbox of isolated replicas (backends/sandbox.py): what bubblewrap is told
to show (never the home, nor a folder holding it), the init that forwards the
controller's SIGTERM once and ends with the replica, and the seccomp filter, run
for real in a sandbox: namespaces, mounts and clone3 refused, threads and forks not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.backends import sandbox, seccomp_profile

INIT = [sys.executable, "-I", "-S", str(sandbox.INIT)]
needs_sandbox = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox: {sandbox.unavailable()}"
)


def shown(args: list[str]) -> list[tuple[str, str]]:
    """(option, path) of every bind in bubblewrap's arguments."""
    binds = ("--ro-bind", "--bind", "--dev-bind")
    return [(args[i], args[i + 2]) for i, a in enumerate(args) if a in binds]


def plan(tmp: Path, **more: object) -> sandbox.Plan:
    workdir, cache = tmp / "home/services/s/versions/1/workdir", tmp / "home/services/s/cache"
    return sandbox.Plan(workdir=workdir, cache=cache, **more)  # type: ignore[arg-type]


def test_the_home_is_shown_only_as_the_plan_names_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = home / "envs" / "abc"
    found = plan(
        tmp_path,
        read_only=(Path("/"), tmp_path, home, home / "control.key", Path(sys.prefix)),
        environment=env,
    )
    binds = shown(sandbox.bwrap_args(found, home, 9))
    paths = [p for _, p in binds]
    assert "/" not in paths and str(tmp_path) not in paths and str(home) not in paths
    assert str(home / "control.key") not in paths
    assert ("--ro-bind", str(env)) in binds and ("--bind", str(found.workdir)) in binds
    assert ("--bind", str(found.cache)) in binds and ("--ro-bind", sys.prefix) in binds
    assert ("--ro-bind", "/etc") in binds and ("--ro-bind", "/home") not in binds
    args = sandbox.bwrap_args(found, home, 9)
    for secret in sandbox.MASKED_FILES:
        if os.path.lexists(secret):  # shown as /dev/null, on a mount without devices
            assert args[args.index(secret) - 1] == "/dev/null", secret


segment = st.sampled_from(["a", "b", "home", "x"])
paths = st.lists(segment, min_size=0, max_size=4).map(lambda parts: Path("/", *parts))


@given(home=paths, read_only=st.lists(paths, max_size=6))
def test_no_path_shown_read_only_holds_or_is_in_the_home(home: Path, read_only: list[Path]) -> None:
    for path in sandbox._outside(read_only, home):
        assert path != home and not home.is_relative_to(path) and not path.is_relative_to(home)


def run_init(code: str) -> subprocess.Popen[bytes]:
    """The init running ``code`` as its replica, in a session of its own (as the
    controller starts a replica: its group is the one signalled)."""
    child = [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.Popen([*INIT, *child], stdout=subprocess.PIPE, start_new_session=True)


def test_the_init_forwards_one_sigterm_and_exits_with_the_replica() -> None:
    """The controller signals the init's group; the replica, in a group of its own,
    gets that SIGTERM once (a second would cut a Python runner's drain short)."""
    proc = run_init("""
        import os, signal, sys, time
        seen = []
        signal.signal(signal.SIGTERM, lambda *_: seen.append(1))
        print(os.getpgid(0) == os.getpid(), flush=True)
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # a second SIGTERM would arrive meanwhile
        print(len(seen), flush=True)
        sys.exit(7)
    """)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"True"  # its own group
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.stdout.readline().strip() == b"1"
    assert proc.wait(timeout=10) == 7


def test_a_replica_without_a_sigterm_handler_stops_at_sigterm() -> None:
    proc = run_init("""
        import time
        print("up", flush=True)
        time.sleep(60)
    """)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM


def test_the_init_says_when_the_command_cannot_run() -> None:
    done = subprocess.run([*INIT, "/nonexistent/steady"], capture_output=True, timeout=10)
    assert done.returncode == 127 and b"cannot run /nonexistent/steady" in done.stderr


PROBE = """
import ctypes, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(result):
    return "ok" if result == 0 else os.strerror(ctypes.get_errno())
found = {
    "unshare user": call(libc.unshare(0x10000000)),
    "unshare net": call(libc.unshare(0x40000000)),
    "mount": call(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
    "clone3": call(libc.syscall(435, None, 0)),
    "keyctl": call(libc.syscall(250, 0, 0, 0, 0, 0)),
}
thread = threading.Thread(target=lambda: None); thread.start(); thread.join()
pid = os.fork()
if pid == 0:
    os._exit(3)
found["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(found))
"""


@needs_sandbox
def test_the_seccomp_filter_refuses_ways_out_and_lets_servers_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    found = plan(tmp_path, read_only=sandbox.interpreter_paths())
    for folder in (found.workdir, found.cache):
        folder.mkdir(parents=True)
    fd = seccomp_profile.program_fd()
    try:
        command = sandbox.wrap(found, home, [sys.executable, "-c", PROBE], fd)
        done = subprocess.run(command, capture_output=True, timeout=30, pass_fds=(fd,))
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer.pop("clone3") == os.strerror(38)  # ENOSYS: libc falls back to clone
    assert answer.pop("fork") == 3
    assert set(answer.values()) == {os.strerror(1)}, answer  # EPERM


def test_the_certificates_the_environment_names_are_shown(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"SSL_CERT_FILE": str(bundle), "PIP_CERT": "relative.pem"}
    env |= {"CURL_CA_BUNDLE": str(tmp_path / "missing.pem"), "PATH": "/usr/bin"}
    assert sandbox.trust_paths(env) == (bundle,)
