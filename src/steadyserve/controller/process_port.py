"""The processes of a home as a starting controller reads and stops them: a port.

Two parts of a controller's start look past the state at the machine: recovery
(recovery.py) lists again the replicas a restored state lost, from what their
processes tell, and the orphan sweep (orphans.py) stops the processes the state
proves its own that no live replica holds. Both read processes (psutil, /proc)
and signal them. Everything they ask of the machine goes through
:class:`ProcessPort`, so that the simulator (sim/world.py), whose replicas are
records and not processes, can answer with its own table and the real decisions
run on it. The machine's answer is ``orphans.MACHINE``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class ProcessView(Protocol):
    """What is read of one process: the part of ``psutil.Process`` the decisions use."""

    @property
    def pid(self) -> int: ...

    def create_time(self) -> float: ...

    def cmdline(self) -> list[str]: ...

    def environ(self) -> dict[str, str]: ...

    def kill(self) -> None:
        """SIGKILL, unless the pid now names another process."""
        ...


@dataclass(frozen=True)
class HomeProcess:
    """A replica's or a load balancer's process of one home."""

    proc: ProcessView
    service: str | None
    replica_id: int | None
    """From the replica's tag; None for a load balancer (or a replica from before tags)."""
    tag: str | None
    group: int | None = None
    """Its process group when found (a load balancer is claimed by its group)."""

    def describe(self) -> str:
        what = "load balancer" if self.tag is None else f"replica {self.replica_id}"
        return f"process {self.proc.pid} ({what} of service {self.service or '?'})"

    def report(self) -> str:
        """What is said of a stray: it runs, unlisted, and is left alone."""
        return (
            f"{self.describe()} runs but the state does not list it: left running, not"
            " managed (stop it, or restore the state that lists it: docs/behaviour.md)"
        )


class ProcessPort(Protocol):
    """What a starting controller reads of, and does to, the processes of its home."""

    def home_processes(self, home: str) -> list[HomeProcess]:
        """Every live replica and load-balancer process of ``home`` (not the caller)."""
        ...

    def tag_of(self, pid: int) -> str | None:
        """The replica tag process ``pid`` carries; None when it has none or is gone."""
        ...

    def stop(self, item: HomeProcess, claimed: set[int]) -> None:
        """SIGKILL a proven orphan, with its process group unless ``claimed`` holds it."""
        ...

    def stop_cgroups(self, home: str, orphaned: Callable[[str], bool]) -> None:
        """Kill and remove each replica cgroup of ``home`` whose tag is ``orphaned``."""
        ...

    def self_contained(self, item: HomeProcess) -> bool:
        """Whether ``item`` leads its process group on the controller's network with
        every core the controller has: then its row needs nothing the process does not
        tell (recovery.running_replica reads the rest from its environment)."""
        ...
