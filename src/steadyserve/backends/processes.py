"""Local processes as the controller holds them: one it started or adopted (a
replica, a load balancer, the gateway), whether a pid still names it, and how its
whole tree is stopped. The local backend runs replicas with these; the controller
supervises its own helper processes with the same ones."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time

import psutil

from steadyserve.backends.base import ReplicaHandle
from steadyserve.backends.cgroups import ReplicaCgroup, memory_text
from steadyserve.wire import replica_contract as contract


class LocalProcess:
    """A replica process: owned (we hold its Popen) or adopted (only its pid)."""

    preempted = False  # a local process is never lost with its machine

    def __init__(
        self,
        pid: int,
        create_time: float | None,
        port: int,
        popen: subprocess.Popen[bytes] | None = None,
        tag: str | None = None,
        *,
        host: str = "127.0.0.1",
        control_port: int | None = None,
        cgroup: ReplicaCgroup | None = None,
        netns: str | None = None,
    ) -> None:
        self._pid = pid
        self._create_time = create_time
        self._host = host
        self._port = port
        self._control_port = control_port
        self._popen = popen
        self._exit: int | None = None
        self.tag = tag  # the replica's STEADY_REPLICA_TAG; None for the LB
        self.cgroup = cgroup  # None for the LB, or where cgroups are not writable
        self.netns = netns  # its own network namespace (netns.py), or None

    @classmethod
    def of(
        cls,
        popen: subprocess.Popen[bytes],
        port: int,
        tag: str | None = None,
        *,
        control_port: int | None = None,
        cgroup: ReplicaCgroup | None = None,
        netns: str | None = None,
    ) -> LocalProcess:
        """A process we just started (its create time guards against pid reuse later)."""
        try:
            create_time: float | None = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            create_time = None
        return cls(
            popen.pid,
            create_time,
            port,
            popen,
            tag,
            control_port=control_port,
            cgroup=cgroup,
            netns=netns,
        )

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def create_time(self) -> float | None:
        return self._create_time

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def control_port(self) -> int | None:
        return self._control_port

    def exit_code(self) -> int | None:
        if self._exit is not None:
            return self._exit
        if self._popen is not None:
            self._exit = self._popen.poll()
            return self._exit
        if not same_process_alive(self._pid, self._create_time):
            self._exit = -1
        return self._exit

    def exit_reason(self) -> str | None:
        """Why the replica exited when the exit code does not say: the kernel
        killed it for reaching its memory limit."""
        if self.cgroup is None or self.cgroup.oom_kills() == 0:
            return None
        limit = self.cgroup.limit()
        at = f" of {memory_text(limit)}" if limit is not None else ""
        return f"out of memory: killed by the kernel at its resources.memory limit{at}"


def same_process_alive(pid: int, create_time: float | None) -> bool:
    """True when ``pid`` still names the process we started (not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 1.0
    except psutil.Error:
        return False


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
    escaped = [p for p in outside.values() if _pgid(p) != pid]
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
