"""Find processes of this home that no service claims, and end them.

A controller killed between starting a process and recording its pid leaves a
process nobody manages. Every process SteadyServe starts carries STEADY_HOME in
its environment, so a restarted controller can find and stop such orphans.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

import psutil

log = logging.getLogger("steadyserve.controller")


def find_orphans(home: str, claimed: set[int]) -> list[psutil.Process]:
    """Replica and LB processes of ``home`` whose process group no one claims."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        try:
            if proc.pid == me or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            if env.get("STEADY_HOME") != home:
                continue
            is_replica = "STEADY_REPLICA_ID" in env
            is_lb = "steadyserve.lb" in proc.cmdline()
            if not (is_replica or is_lb):
                continue
            if os.getpgid(proc.pid) in claimed:
                continue
            found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def reap_orphans(home: str, claimed: set[int]) -> int:
    """SIGKILL every orphan's process group; return how many processes were found."""
    orphans = find_orphans(home, claimed)
    for proc in orphans:
        log.warning("stopping orphan process %s: %s", proc.pid, " ".join(proc.cmdline())[:200])
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    return len(orphans)
