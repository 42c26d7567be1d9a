"""A replica's own network namespace, as a pod has: its own loopback and ports.

SkyServe replicas bind the port their file names (``--port 8080``); on one
machine only one process can hold it. In a network namespace of its own every
replica binds it, cannot reach the host's loopback (the controller's API, other
services), and reaches the outside through ``slirp4netns`` with the host's
loopback hidden (``--disable-host-loopback``). Nothing on the host changes: no
veth pair, no iptables/nft rule, no sysctl; the namespace is a file under
``/run/netns`` and one helper process, both removed with the replica.

A namespace is named from the home, the service and the replica id
(:func:`name_for`), so a restarted controller finds it again from the replica's
row, and reaps those of its home that no replica claims (:func:`reap`).

Only root makes namespaces here (``ip netns add``); :func:`unavailable` says why
isolation cannot be had on this machine, in one line (docs/isolation.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import psutil

from steadyserve.wire.netns import (
    NETNS_DIR,
    PREFIX,
    home_prefix,
    of_home,
    path_of,
    sysctl_in,
)
from steadyserve.wire.netns import name_for as name_for  # one naming, two sides

HOMES_DIR = Path("/run/steadyserve/netns-homes")
"""One file per home that made namespaces, named by its prefix's hash and holding
the home's path: how a controller tells a deleted home's namespaces from another
live home's (:func:`reap_deleted_homes`). On tmpfs, like the namespaces."""
READY_TIMEOUT_S = 10.0
"""Longest wait for slirp4netns to configure the namespace's tap device."""
IP_TIMEOUT_S = 10.0


class NamespaceError(RuntimeError):
    """A namespace or its helper could not be made; one line."""


@lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why replicas cannot get their own network here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    if os.geteuid() != 0:
        return "making network namespaces needs root here (the controller runs as a user)"
    for tool in ("ip", "slirp4netns"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 slirp4netns)"
    return None


def helper_log(replica_log: Path) -> Path:
    """Where a namespace's slirp4netns writes: beside the replica's log."""
    return replica_log.with_name(replica_log.name + ".slirp4netns")


def exec_command(name: str, command: list[str]) -> list[str]:
    """``command`` run inside the namespace: ``ip netns exec`` enters it and execs,
    so the replica keeps the pid (and process group) the backend started."""
    return ["ip", "netns", "exec", name, *command]


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def _ip(*args: str) -> None:
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, timeout=IP_TIMEOUT_S, check=False, text=True
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"ip {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise NamespaceError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def create(name: str, log_path: Path) -> None:
    """The namespace with its loopback up and outbound traffic through slirp4netns."""
    if not exists(name):
        _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        unprivileged_ports(name)
        ensure_helper(name, log_path)
    except BaseException:
        remove(name)
        raise


def unprivileged_ports(name: str) -> None:
    """Let a replica without capabilities (sandbox.py) bind any port of its own
    namespace, 80 included, as container runtimes do: the namespace is the
    replica's alone, so a port below 1024 guards nothing there."""
    try:
        sysctl_in(path_of(name), "net.ipv4.ip_unprivileged_port_start", "0")
    except OSError as exc:
        raise NamespaceError(f"cannot open the ports of {name} below 1024: {exc}") from None


def helpers(name: str) -> list[psutil.Process]:
    """The slirp4netns processes serving the namespace (one, unless something raced)."""
    found = []
    target = path_of(name)
    for proc in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info["cmdline"] or []
            named = proc.info["name"] == "slirp4netns" and target in cmdline
            if named and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def ensure_helper(name: str, log_path: Path) -> None:
    """Start the namespace's slirp4netns unless it runs (a restarted controller's
    check: the helper outlives the controller in its own session, like replicas)."""
    if helpers(name):
        return
    read_end, write_end = os.pipe()
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [
                    "slirp4netns",
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    f"--ready-fd={write_end}",
                    "--netns-type=path",
                    path_of(name),
                    "tap0",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                start_new_session=True,
            )
        os.close(write_end)
        write_end = -1
        ready = _wait_ready(read_end, proc)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    if not ready:
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait(timeout=5)
        raise NamespaceError(f"slirp4netns did not configure {name} (see {log_path})")


def _wait_ready(fd: int, proc: subprocess.Popen[bytes]) -> bool:
    """True once slirp4netns wrote to its ready fd; False when it exited or timed out."""
    import select

    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], 0.1)
        if readable:
            return os.read(fd, 1) == b"1"
        if proc.poll() is not None:
            return False
    return False


def remove(name: str) -> None:
    """End every process left in the namespace and its helper, then delete it."""
    for pid in _pids_in(name):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    found = helpers(name)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(found, timeout=5)
    if exists(name):
        with contextlib.suppress(NamespaceError):
            _ip("netns", "del", name)


def _pids_in(name: str) -> list[int]:
    if not exists(name):
        return []
    try:
        done = subprocess.run(
            ["ip", "netns", "pids", name], capture_output=True, text=True, timeout=IP_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def reap(home_root: Path | str, keep: set[str]) -> list[str]:
    """Remove this home's namespaces no live replica claims (a controller killed
    between making one and recording its replica, or while stopping one)."""
    gone = [name for name in of_home(home_root) if name not in keep]
    for name in gone:
        remove(name)
    return gone


def record_home(home_root: Path | str) -> None:
    """Note which home this home's namespace prefix stands for (once). Best effort:
    without the record a deleted home's namespaces are only never reaped."""
    path = HOMES_DIR / home_prefix(home_root)[len(PREFIX) : -1]
    with contextlib.suppress(OSError):
        if not path.exists():
            HOMES_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(str(home_root))
            tmp.replace(path)


def reap_deleted_homes(home_root: Path | str) -> list[str]:
    """Remove the namespaces of homes that no longer exist (deleted with replicas
    still running, or after a crash): their controller is gone for good, and no
    other controller claims them. A namespace whose home is unknown (no record)
    or still exists is never touched: it may be another live home's."""
    own = home_prefix(home_root)
    gone: list[str] = []
    with contextlib.suppress(OSError):
        names = sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(PREFIX))
        for name in names:
            digest = name[len(PREFIX) :].split("-", 1)[0]
            if name.startswith(own) or not digest:
                continue
            try:
                home = Path((HOMES_DIR / digest).read_text())
            except OSError:
                continue  # unknown home: never guess
            if home_prefix(home) != f"{PREFIX}{digest}-" or home.exists():
                continue
            remove(name)
            gone.append(name)
    return gone
