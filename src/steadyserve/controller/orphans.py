"""Find processes of this home that no service claims; end only the proven orphans.

A controller killed between starting a process and recording its pid leaves a
process nobody manages. Load balancers carry STEADY_HOME in their environment;
every process of a replica, its children included (even those that left its
process group with ``setsid``), carries the replica's tag
(``STEADY_REPLICA_TAG``: ``<home-id>/<service>/<replica-id>``) and, where
cgroups are writable, sits in the replica's cgroup, whose name repeats the tag
(so a process that cleared its environment is still found).

Such a process is stopped only when the state proves it an orphan of *this*
state: a replica whose (service, id) the state recorded (a replica's row and
event are written before its process starts) and that no live replica holds,
or a load balancer of a service the state knows. Anything else (a state
restored from a backup a few seconds old, a state begun afresh beside running
services) is a stray: reported in the log, left running, never stopped.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from steadyserve.backends import processes
from steadyserve.backends.cgroups import Cgroups, tag_in_cgroup
from steadyserve.controller.process_port import HomeProcess, ProcessPort
from steadyserve.wire import netns
from steadyserve.wire import replica_contract as contract

log = logging.getLogger("steadyserve.controller")


@dataclass(frozen=True)
class Known:
    """What the state recorded: every (service, replica id) and every service name."""

    replicas: set[tuple[str, int]]
    services: set[str]


def parse_tag(tag: str) -> tuple[str, int] | None:
    """``(service, replica id)`` of a replica tag, or None when it is not one."""
    _, _, rest = tag.partition("/")
    service, _, number = rest.rpartition("/")
    return (service, int(number)) if service and number.isdigit() else None


def _lb_service(cmdline: list[str]) -> str | None:
    for flag, value in itertools.pairwise(cmdline):
        if flag == "--service":
            return value
    return None


def home_processes(home: str) -> list[HomeProcess]:
    """Every live replica and load-balancer process of ``home`` (not the caller)."""
    home_id = contract.home_id(home)
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        try:
            if proc.pid == me or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            try:
                env = proc.environ()
            except psutil.AccessDenied:
                env = {}
            tag = env.get(contract.REPLICA_TAG) or tag_in_cgroup(proc.pid, home_id)
            if tag is not None and contract.tag_of_home(tag, home):
                parsed = parse_tag(tag)
                service, number = parsed if parsed else (None, None)
                found.append(HomeProcess(proc, service, number, tag))
                continue
            if env.get("STEADY_HOME") != home:
                continue
            cmdline = proc.cmdline()
            group = os.getpgid(proc.pid)
            if "steadyserve.lb" in cmdline:
                found.append(HomeProcess(proc, _lb_service(cmdline), None, None, group))
            elif contract.REPLICA_ID in env:  # a replica from before tags
                found.append(HomeProcess(proc, env.get(contract.SERVICE_NAME), None, None, group))
        except (psutil.Error, OSError):
            continue
    return found


def sort_out(
    found: list[HomeProcess], live_tags: set[str], claimed: set[int], known: Known
) -> tuple[list[HomeProcess], list[HomeProcess]]:
    """``(orphans, strays)`` among processes no live replica (``live_tags``) or LB
    (``claimed`` pids) holds: orphans the state proves its own, strays the others."""
    orphans: list[HomeProcess] = []
    strays: list[HomeProcess] = []
    for item in found:
        if item.tag is not None:
            if item.tag in live_tags:
                continue
            key = (item.service, item.replica_id)
            mine = item.service is not None and key in known.replicas
        else:
            if item.group is None or item.group in claimed or item.proc.pid in claimed:
                continue
            mine = item.service in known.services
        (orphans if mine else strays).append(item)
    return orphans, strays


class MachineProcesses:
    """The real :class:`~steadyserve.controller.process_port.ProcessPort`: this
    machine's processes through psutil and /proc, signals, and replica cgroups."""

    def home_processes(self, home: str) -> list[HomeProcess]:
        return home_processes(home)

    def tag_of(self, pid: int) -> str | None:
        return processes.tag_of(pid)

    def stop(self, item: HomeProcess, claimed: set[int]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            pgid = os.getpgid(item.proc.pid)
            if pgid not in claimed:
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            item.proc.kill()

    def stop_cgroups(self, home: str, orphaned: Callable[[str], bool]) -> None:
        for tag, cgroup in Cgroups.of_machine().replica_dirs(contract.home_id(home)).items():
            if orphaned(tag):
                cgroup.kill()
                cgroup.remove()

    def self_contained(self, item: HomeProcess) -> bool:
        pid = item.proc.pid
        if os.getpgid(pid) != pid:  # a child: its leader stands for it
            return False
        if os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"):
            return False
        proc = item.proc if isinstance(item.proc, psutil.Process) else psutil.Process(pid)
        return len(proc.cpu_affinity() or []) == len(psutil.Process().cpu_affinity() or [])


MACHINE: ProcessPort = MachineProcesses()
"""The machine's processes: what a controller's start reads unless told otherwise."""


def live(claimed: set[int], machine: ProcessPort = MACHINE) -> set[str]:
    """The tags of the claimed replica leaders (a load balancer has none)."""
    return {tag for tag in map(machine.tag_of, claimed) if tag is not None}


def reap_orphans(
    home: str, claimed: set[int], known: Known, machine: ProcessPort = MACHINE
) -> list[HomeProcess]:
    """SIGKILL every proven orphan (and its process group when no one claims that),
    report every stray; return the strays."""
    live_tags = live(claimed, machine)
    orphans, strays = sort_out(machine.home_processes(home), live_tags, claimed, known)
    for item in orphans:
        with contextlib.suppress(psutil.Error):
            log.warning(
                "stopping orphan %s: %s", item.describe(), " ".join(item.proc.cmdline())[:200]
            )
        machine.stop(item, claimed)
    for item in strays:
        log.warning("%s", item.report())
    machine.stop_cgroups(
        home, lambda tag: tag not in live_tags and parse_tag(tag) in known.replicas
    )
    return strays


def kept_namespaces(root: Path, claimed: set[str], known: Known) -> set[str]:
    """The network namespaces the sweep keeps: those live replicas hold, and any the
    state never recorded (a live stray's may be one); the others are proven orphans'."""
    proven = {netns.name_for(root, service, number) for service, number in known.replicas}
    return claimed | (set(netns.of_home(root)) - proven)
