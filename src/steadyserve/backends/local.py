"""Replicas as local subprocesses, each in its own process group and cgroup.

A process group per replica lets SIGTERM/SIGKILL reach everything ``run``
started (a shell's children included) and keeps replicas alive when the
controller dies, so a restarted controller can re-adopt them. A child that
leaves the group (``setsid``, a daemonizing double fork) is still in the
replica's cgroup (cgroups.py), where the machine lets the controller make one,
and carries the replica's tag (``STEADY_REPLICA_TAG``) unless it clears its
environment; stopping a replica signals all of them. The cgroup also holds the
replica's memory limit (``resources.memory`` without ``+``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from steadyserve.backends import netns
from steadyserve.backends.base import AdoptRequest, LaunchRequest, ProvisionError, ReplicaHandle
from steadyserve.backends.cgroups import Cgroups, ReplicaCgroup
from steadyserve.backends.ports import PortReservations, PortsExhausted
from steadyserve.backends.processes import (
    LocalProcess,
    kill_group,
    same_process_alive,
    stop_group,
    tag_of,
)
from steadyserve.envs import build as environment_build
from steadyserve.envs.plan import needs_environment
from steadyserve.home import unix_socket
from steadyserve.home.paths import Home, user_umask
from steadyserve.wire import replica_contract as contract

_log = logging.getLogger("steadyserve.controller")


class LocalBackend:
    places = True

    def isolation_unavailable(self) -> str | None:
        return netns.unavailable()

    def reap_isolation(self, keep: set[str]) -> None:
        netns.reap(self.home.root, keep)
        netns.reap_deleted_homes(self.home.root)

    """Run replicas on this machine."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._setup_locks: dict[tuple[str, int], asyncio.Lock] = {}
        # The virtualenv each prepared version runs in, if any.
        self.environments: dict[tuple[str, int], environment_build.Environment] = {}
        self.ports = PortReservations()
        self._cgroups: Cgroups | None = None
        self._said: set[str] = set()

    @property
    def cgroups(self) -> Cgroups:
        """The machine's cgroups, found at the first launch and said once in the
        controller's log (with what is lost when there are none)."""
        if self._cgroups is None:
            self._cgroups = Cgroups.of_machine()
            if self._cgroups.hierarchies:
                _log.info("replicas get their own cgroups (%s)", self._cgroups.describe())
            else:
                self._say_once(
                    "no writable cgroups: replicas are tracked by STEADY_REPLICA_TAG"
                    " (a process that clears its environment escapes) and"
                    " resources.memory limits are not enforced"
                )
        return self._cgroups

    def _say_once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            _log.warning("%s", message)

    def _cgroup_for(self, request: LaunchRequest) -> ReplicaCgroup | None:
        """The replica's cgroup, made now, with its memory limit; None (and a line
        in the log, once) when the machine gives none."""
        tag = request.env.get(contract.REPLICA_TAG)
        resources = request.resources
        limit = resources.memory_limit_bytes if resources is not None else None
        if tag is None or not self.cgroups.hierarchies:
            return None
        if limit is not None and not self.cgroups.has_memory:
            self._say_once("no memory cgroup here: resources.memory limits are not enforced")
            limit = None
        try:
            cgroup = self.cgroups.create(tag, limit)
        except OSError as exc:
            self._say_once(f"cannot create replica cgroups ({exc}): tracking by tag")
            return None
        if limit is not None and cgroup.limit() is None:
            self._say_once(
                "the controller's cgroup cannot enable memory for its children:"
                " resources.memory limits are not enforced"
            )
        return cgroup

    async def prepare(
        self,
        service: str,
        version: int,
        setup: str | None,
        env: dict[str, str],
        pip: list[str] | str | None = None,
    ) -> Path:
        workdir = self.home.version_workdir(service, version)
        if not workdir.is_dir():
            raise ProvisionError(f"workdir of version {version} is missing: {workdir}")
        if needs_environment(setup, pip):
            await self._prepare_environment(service, version, workdir, setup, pip, env)
            return workdir
        if not setup:
            return workdir
        lock = self._setup_locks.setdefault((service, version), asyncio.Lock())
        async with lock:
            marker = self.home.version_dir(service, version) / contract.SETUP_MARKER
            if marker.exists():
                return workdir
            log_path = self.home.version_dir(service, version) / "setup.log"
            with open(log_path, "ab") as log:
                os.chmod(log_path, 0o600)
                proc = await asyncio.create_subprocess_exec(
                    "bash",
                    "-c",
                    setup,
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    umask=user_umask(),
                )
                try:
                    code = await proc.wait()
                except asyncio.CancelledError:
                    kill_group(proc.pid, signal.SIGKILL)
                    raise
            if code != 0:
                raise ProvisionError(f"setup exited with code {code} (see {log_path})")
            marker.touch()
        return workdir

    async def _prepare_environment(
        self,
        service: str,
        version: int,
        workdir: Path,
        setup: str | None,
        pip: list[str] | str | None,
        env: dict[str, str],
    ) -> None:
        """The version's own virtualenv, built once per content key: ``pip:`` and
        ``setup`` run inside it, and so will its replicas."""
        version_dir = self.home.version_dir(service, version)
        setup_log = version_dir / "setup.log"
        try:
            environment, _ = await environment_build.ensure(
                self.home, workdir, setup, pip, env, failure_log=setup_log
            )
        except environment_build.BuildError as exc:
            raise ProvisionError(f"{exc} (see {setup_log})") from None
        self.environments[(service, version)] = environment
        staging = version_dir / ".setup.log.new"
        with contextlib.suppress(OSError):  # its build's output, shown in replica logs
            staging.unlink(missing_ok=True)
            os.link(environment.log, staging)
            os.rename(staging, setup_log)
        (version_dir / contract.SETUP_MARKER).touch()

    def _in_environment(self, request: LaunchRequest) -> tuple[list[str], dict[str, str]]:
        """The command and environment of a replica of a version with its own
        virtualenv: activated, and the venv's interpreter for a Python replica."""
        environment = self.environments.get((request.service, request.version))
        if environment is None:
            return request.command, request.env
        command = list(request.command)
        if command and command[0] == sys.executable:
            command[0] = environment.python
        return command, environment.activate(request.env)

    async def launch(self, request: LaunchRequest) -> LocalProcess:
        """Start the replica on this machine, on free ports no other replica of
        this controller was handed (``ports``: the OS alone may hand one out twice
        before the first replica has bound it). A fixed-port replica binds its
        file's port: in a network namespace of its own when it asks for isolation
        and this machine can make one (netns.py), else on the host's."""
        try:
            port, *rest = self.ports.take(2 if request.control_port else 1)
        except PortsExhausted as exc:
            raise ProvisionError(str(exc)) from None
        control_port = rest[0] if rest else None
        if request.fixed_port is not None:
            self.ports.release(port)
            port = request.fixed_port
        command, env = self._in_environment(request)
        if request.cores:
            command = pinned(command, request.cores)
        name = None
        if request.isolate and netns.unavailable() is None:
            name = netns.name_for(self.home.root, request.service, request.replica_id)
            request.log_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                await asyncio.to_thread(netns.record_home, self.home.root)
                await asyncio.to_thread(netns.create, name, netns.helper_log(request.log_path))
            except netns.NamespaceError as exc:
                raise ProvisionError(str(exc)) from None
            command = netns.exec_command(name, command)
        cgroup = await asyncio.to_thread(self._cgroup_for, request)
        if cgroup is not None:
            command = cgroup.enter(command)
        env = {**env, contract.PORT: str(port), contract.HOST: "127.0.0.1"}
        if control_port is not None:  # a Python replica
            env[contract.CONTROL_PORT] = str(control_port)
            # Handle calls from replicas in their own network namespace arrive by path
            # (bound through its directory's descriptor where the home's path is long).
            call_socket = self.home.call_socket(request.service, request.replica_id)
            if unix_socket.bindable(call_socket):
                env[contract.CALL_SOCKET] = str(call_socket)
            if name is not None:  # its handles reach the host only through the home
                env[contract.ROUTES_SOCKET] = str(self.home.routes_socket)
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        setup_log = self.home.version_dir(request.service, request.version) / "setup.log"
        with open(request.log_path, "ab") as log:
            os.chmod(request.log_path, 0o600)
            if request.setup_in_log and setup_log.exists():
                log.write(b"--- setup output of this version ---\n" + setup_log.read_bytes())
                log.write(b"--- replica output ---\n")
                log.flush()
            try:
                popen = subprocess.Popen(
                    command,
                    cwd=request.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    umask=user_umask(),
                )
            except BaseException:
                if cgroup is not None:
                    cgroup.remove(timeout_s=0)
                raise
        return LocalProcess.of(
            popen,
            port,
            request.env.get(contract.REPLICA_TAG),
            control_port=control_port,
            cgroup=cgroup,
            netns=name,
        )

    def adopt(self, request: AdoptRequest) -> LocalProcess | None:
        pid, create_time = request.pid, request.create_time
        if not same_process_alive(pid, create_time):
            return None
        if request.netns is not None:  # its helper may have died meanwhile
            log = self.home.replica_log(request.service, request.replica_id)
            with contextlib.suppress(netns.NamespaceError, OSError):
                netns.ensure_helper(request.netns, netns.helper_log(log))
        cgroup = self.cgroups.of_pid(pid, contract.home_id(self.home.root))
        return LocalProcess(
            pid,
            create_time,
            request.port,
            tag=tag_of(pid),
            host=request.host,
            control_port=request.control_port,
            cgroup=cgroup,
            netns=request.netns,
        )

    async def stop(self, handle: ReplicaHandle, timeout_s: float) -> None:
        await stop_group(handle, timeout_s)
        tag = getattr(handle, "tag", None)  # <home-id>/<service>/<replica id>
        if handle.control_port is not None and tag is not None and tag.count("/") >= 2:
            # A runner killed after the graceful timeout leaves its call socket behind.
            head, replica_id = tag.rsplit("/", 1)
            if replica_id.isdigit():
                service = head.split("/", 1)[1]
                unix_socket.remove(self.home.call_socket(service, int(replica_id)))
        name = getattr(handle, "netns", None)
        if name is not None:
            await asyncio.to_thread(netns.remove, name)
        self.ports.release(handle.port)
        self.ports.release(handle.control_port)


_PIN = "import os, sys; os.sched_setaffinity(0, {cores}); os.execvp(sys.argv[1], sys.argv[1:])"


def pinned(command: list[str], cores: tuple[int, ...]) -> list[str]:
    """``command`` on ``cores`` only, it and every process it starts: the affinity
    is set in the child before it runs the command (exec keeps the pid, so the
    process group and re-adoption are unchanged). Not ``preexec_fn``, which is
    unsafe in a controller with threads."""
    code = _PIN.format(cores=sorted(cores))
    return [sys.executable, "-c", code, *command]
