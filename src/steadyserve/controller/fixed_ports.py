"""Replicas that listen on a fixed port instead of their ``$PORT``.

SkyServe apps often bind a port of their own (``--port 8080``). Under SteadyServe
each replica is given ``$PORT``; one that listens elsewhere never passes its
readiness probe, and a second one fails with "Address already in use". While a
replica's probe fails, :class:`PortWatch` looks at the listening sockets of its
process tree and, once per replica, says where it listens instead: an event,
and a notice in ``steady status``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil

from steadyserve.controller.clock import SYSTEM_CLOCK

CHECK_EVERY_S = 1.0
"""A failing probe repeats quickly while a replica starts; /proc is read at most this often."""


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process and all its descendants listen on ({} when it is gone)."""
    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except (psutil.Error, OSError):
        return set()
    ports: set[int] = set()
    for proc in family:
        try:
            conns = proc.net_connections(kind="inet")
        except (psutil.Error, OSError):
            continue
        ports.update(c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr)
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
