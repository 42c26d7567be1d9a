"""Stopping a local replica: SIGTERM to everything it started, SIGKILL after its
grace period, wherever its processes went.

A replica's process group gets the first SIGTERM; a process that left the group
(``setsid``, a double fork) is found by its cgroup or its tag
(``STEADY_REPLICA_TAG``) and signalled too, except inside a sandbox's own PID
namespace (sandbox.py), whose init passes the group's SIGTERM on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import psutil

from steadyserve import replica_contract as contract
from steadyserve.backends.base import ReplicaHandle
from steadyserve.backends.cgroups import ReplicaCgroup


def kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def tag_of(pid: int) -> str | None:
    """The replica tag in a process's environment, if it has one we may read."""
    try:
        return psutil.Process(pid).environ().get(contract.REPLICA_TAG)
    except psutil.Error:
        return None


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Every live process carrying ``tag``: a replica's whole tree, wherever it went."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        try:
            if proc.pid == me or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(contract.REPLICA_TAG) == tag:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _in_own_pid_ns(proc: psutil.Process) -> bool:
    """False for a process in a sandbox's PID namespace (sandbox.py): its init
    forwards the replica's SIGTERM to it, and a second SIGTERM would tell a Python
    runner to stop waiting for in-flight requests. Unknown counts as ours."""
    try:
        return os.readlink(f"/proc/{proc.pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
    except OSError:
        return True


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None


def _signal_all(procs: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)  # psutil checks the pid still names the same process


def _all_gone(procs: list[psutil.Process]) -> bool:
    alive = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return not alive


def _members(cgroup: ReplicaCgroup | None) -> list[psutil.Process]:
    found = []
    for pid in cgroup.pids() if cgroup is not None else ():
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


async def stop_group(handle: ReplicaHandle, timeout_s: float) -> None:
    """SIGTERM the process group and every other process of the replica (in its
    cgroup, or with its tag), SIGKILL what is left after ``timeout_s``, wait for
    the end, and delete the cgroup."""
    pid = handle.pid
    if pid is None:
        return
    tag = getattr(handle, "tag", None)
    cgroup: ReplicaCgroup | None = getattr(handle, "cgroup", None)
    # Only those outside the group: the group gets one signal, as a second SIGTERM
    # would tell a Python runner to stop waiting for in-flight requests.
    outside = {p.pid: p for p in (tagged_processes(tag) if tag else [])}
    outside.update((p.pid, p) for p in _members(cgroup))
    escaped = [p for p in outside.values() if _pgid(p) != pid and _in_own_pid_ns(p)]
    if handle.exit_code() is None or not _all_gone(escaped):
        kill_group(pid, signal.SIGTERM)
        _signal_all(escaped, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while (handle.exit_code() is None or not _all_gone(escaped)) and (
            time.monotonic() < deadline
        ):
            await asyncio.sleep(0.05)
    # Whatever is left of the group (the leader or its children) goes now, and any
    # tagged process started since the first look.
    kill_group(pid, signal.SIGKILL)
    if tag:
        _signal_all(tagged_processes(tag), signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill()
    for _ in range(100):
        if handle.exit_code() is not None and not (cgroup is not None and cgroup.pids()):
            break
        await asyncio.sleep(0.02)
    if cgroup is not None:
        await asyncio.to_thread(cgroup.remove)
