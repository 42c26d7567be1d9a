"""Replicas that listen on a fixed port instead of their ``$PORT``.

SkyServe apps often bind a port of their own (``--port 8080``). Under SteadyServe
each replica is given ``$PORT``; one that listens elsewhere never passes its
readiness probe, and a second one fails with "Address already in use". While a
replica's probe fails, :class:`PortWatch` looks at the listening sockets of its
process tree and, once per replica, says where it listens instead: an event,
and a notice in ``steady status``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable

import psutil

from steadyserve.controller.clock import SYSTEM_CLOCK

CHECK_EVERY_S = 1.0
"""A failing probe repeats quickly while a replica starts; /proc is read at most this often."""


_LISTEN = "0A"
"""A listening socket's state in /proc/net/tcp."""


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process and all its descendants listen on ({} when it is gone).

    Read from ``/proc/<pid>/net/tcp{,6}``, the tables of the process's own network
    namespace: a replica isolated in one of its own (backends/netns.py) listens
    where the controller's /proc/net does not show it."""
    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except (psutil.Error, OSError):
        return set()
    ports: set[int] = set()
    for proc in family:
        ports |= _listening_of(proc.pid)
    return ports


def _listening_of(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as rows:
            next(rows, None)  # the header
            for row in rows:
                fields = row.split()
                if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def wrong_port_notice(replica_id: int, expected: int, ports: Iterable[int]) -> str | None:
    """The notice for a replica listening on other ports but not on ``expected``."""
    found = sorted(set(ports))
    if not found or expected in found:
        return None
    where = ", ".join(str(p) for p in found)
    return (
        f"replica {replica_id} listens on {where}, not on its $PORT {expected}:"
        " use --port $PORT; see docs/skyserve.md"
    )


class PortWatch:
    """Per service: which replicas were found on the wrong port, and when each was
    last looked at. ``record`` is called once per replica found (the event)."""

    def __init__(
        self,
        record: Callable[[int, str], None],
        clock: Callable[[], float] = SYSTEM_CLOCK.now,
        ports_of: Callable[[int], set[int]] = listening_ports,
    ) -> None:
        self.notices: dict[int, str] = {}
        self._record = record
        self._clock = clock
        self._ports_of = ports_of
        self._last: dict[int, float] = {}

    def check(self, replica_id: int, pid: int | None, port: int | None) -> None:
        if pid is None or port is None or replica_id in self.notices:
            return
        now = self._clock()
        if now - self._last.get(replica_id, -CHECK_EVERY_S) < CHECK_EVERY_S:
            return
        self._last[replica_id] = now
        notice = wrong_port_notice(replica_id, port, self._ports_of(pid))
        if notice is not None:
            self.notices[replica_id] = notice
            self._record(replica_id, notice)

    def forget(self, replica_id: int) -> None:
        self.notices.pop(replica_id, None)
        self._last.pop(replica_id, None)
