"""The simulated replicas as processes, for what a starting controller reads of the
machine: the recovery of a lost state and the orphan sweep
(controller/process_port.py), answered from the simulated backend's records.

A simulated replica carries what the local backend gives a real one: its launch
request's environment (the replica tag, its service and version) with the
``PORT`` and ``HOST`` the backend adds, and its command line; it leads a process
group of its own (the local backend starts each in a new session), on the
host's network, pinned to no cores unless its launch asked for some. A stop by
the sweep ends it as SIGKILL would, and is recorded (``swept``) for the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from steadyserve.backends.fake import FakeReplica
from steadyserve.controller.orphans import parse_tag
from steadyserve.controller.process_port import HomeProcess
from steadyserve.wire import replica_contract as contract

if TYPE_CHECKING:
    from steadyserve.sim.world import SimBackend

KILLED = -9
"""The exit code of a process ended by SIGKILL, as Popen reports it."""


class SimProcess:
    """One simulated replica as ``psutil.Process`` shows a real one."""

    def __init__(self, replica: FakeReplica, born: float) -> None:
        self.replica = replica
        self.born = born

    @property
    def pid(self) -> int:
        return self.replica._pid

    def create_time(self) -> float:
        return self.born

    def cmdline(self) -> list[str]:
        return list(self.replica.request.command)

    def environ(self) -> dict[str, str]:
        return {
            **self.replica.request.env,
            contract.PORT: str(self.replica.port),
            contract.HOST: self.replica.host,
        }

    def kill(self) -> None:
        self.replica.exit(KILLED)


class SimMachine:
    """The :class:`~steadyserve.controller.process_port.ProcessPort` of the simulated
    machine: its processes are the backend's live replicas."""

    def __init__(self, backend: SimBackend) -> None:
        self.backend = backend
        self.swept: list[int] = []
        """Pids the orphan sweep stopped, in order."""

    def _view(self, pid: int) -> SimProcess | None:
        replica = self.backend.replicas.get(pid)
        if replica is None or replica.exit_code() is not None:
            return None
        return SimProcess(replica, self.backend.processes[pid].born)

    def home_processes(self, home: str) -> list[HomeProcess]:
        found = []
        for pid in sorted(self.backend.replicas):
            view = self._view(pid)
            tag = None if view is None else view.environ().get(contract.REPLICA_TAG)
            if view is None or tag is None or not contract.tag_of_home(tag, home):
                continue
            service, number = parse_tag(tag) or (None, None)
            found.append(HomeProcess(view, service, number, tag, group=pid))
        return found

    def tag_of(self, pid: int) -> str | None:
        view = self._view(pid)
        return None if view is None else view.environ().get(contract.REPLICA_TAG)

    def stop(self, item: HomeProcess, claimed: set[int]) -> None:
        if self._view(item.proc.pid) is not None:
            item.proc.kill()
            self.swept.append(item.proc.pid)

    def stop_cgroups(self, home: str, orphaned: Callable[[str], bool]) -> None:
        """No cgroups: a simulated replica has no process left behind its leader."""

    def self_contained(self, item: HomeProcess) -> bool:
        view = self._view(item.proc.pid)
        return view is not None and not view.replica.request.cores
