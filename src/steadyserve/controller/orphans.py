"""Find processes of this home that no service claims, and end them.

A controller killed between starting a process and recording its pid leaves a
process nobody manages. Load balancers carry STEADY_HOME in their environment;
every process of a replica, its children included (even those that left its
process group with ``setsid``), carries the replica's tag
(``STEADY_REPLICA_TAG``, whose first part names the home) and, where cgroups
are writable, sits in the replica's cgroup, whose name repeats the tag (so a
process that cleared its environment is still found). A restarted controller
stops the processes whose tag names no live replica, and never a live
replica's descendant, wherever its process group is; then it deletes the
cgroups of replicas that are not live.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

import psutil

from steadyserve.backends.cgroups import Cgroups, tag_in_cgroup
from steadyserve.backends.processes import tag_of
from steadyserve.wire import replica_contract as contract

log = logging.getLogger("steadyserve.controller")


def find_orphans(home: str, claimed: set[int]) -> list[psutil.Process]:
    """Replica and LB processes of ``home`` that no live replica or LB claims.

    ``claimed`` are the pids the controller manages (replica leaders and LBs);
    a replica process is claimed when it carries the tag of a claimed leader.
    """
    live_tags = live(claimed)
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
                if tag not in live_tags:
                    found.append(proc)
                continue
            if env.get("STEADY_HOME") != home:
                continue
            # A replica from before tags, or a load balancer: judged by its group.
            is_replica = contract.REPLICA_ID in env
            is_lb = "steadyserve.lb" in proc.cmdline()
            if not (is_replica or is_lb):
                continue
            if os.getpgid(proc.pid) in claimed:
                continue
            found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def live(claimed: set[int]) -> set[str]:
    """The tags of the claimed replica leaders (a load balancer has none)."""
    return {tag for tag in map(tag_of, claimed) if tag is not None}


def reap_orphans(home: str, claimed: set[int]) -> int:
    """SIGKILL every orphan (and its process group when no one claims that);
    return how many processes were found."""
    orphans = find_orphans(home, claimed)
    for proc in orphans:
        with contextlib.suppress(psutil.Error):
            log.warning("stopping orphan process %s: %s", proc.pid, " ".join(proc.cmdline())[:200])
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            pgid = os.getpgid(proc.pid)
            if pgid not in claimed:
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            proc.kill()
    live_tags = live(claimed)
    for tag, cgroup in Cgroups.of_machine().replica_dirs(contract.home_id(home)).items():
        if tag not in live_tags:
            cgroup.kill()
            cgroup.remove()
    return len(orphans)
