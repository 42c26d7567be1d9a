"""Ports for local replicas: free when handed out, and never handed out twice while
a replica may still be about to bind them.

The OS hands a free port to ``bind(port 0)``, but a replica binds its ``$PORT``
only after its interpreter has started and imported its framework: a second or,
for a model server, minutes later. Asked again in that window, the OS may hand
the same port to the next replica (or to the same replica's control port), and
one of them dies with "address already in use" -- before it was ready, so its
version would be judged broken. The controller therefore remembers every port it
handed out until the replica is stopped (or ``HOLD_S`` passed), and asks for all
of one replica's ports with the earlier ones still bound.

Nor are the ports taken from the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default), although that is
where ``bind(port 0)`` finds them: every outgoing connection on the machine (a
probe, the load balancer's pool, a client, ``pip``) takes its local port from
that range too, and one that happens to take a replica's port in the second
before the replica binds it makes the replica fail with "address already in
use" all the same. Replicas get ports from ``REPLICA_PORTS`` instead, below the
ephemeral range and the services' endpoints (30001 up), scanned from a moving
cursor so that a port just given up is the last to be handed out again. Only
when that range lies inside the ephemeral one (a machine configured so) does
the OS choose, as before. ``STEADY_PORTS`` (port_range.py) replaces
``REPLICA_PORTS`` with the middle half of its range, taken as given: the user
chose it, so it is never left to the OS.
"""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

from steadyserve import port_range

HOLD_S = 3600.0
"""Longest a handed-out port is remembered when its replica is never stopped
through this backend (e.g. the controller restarted and adopted it: by then it
has long bound its port, and the kernel itself keeps it from anyone else)."""
MAX_TRIES = 256
"""Bound on ``bind`` calls for one replica's ports; the ephemeral range holds
thousands of ports, so reaching it means the machine is out of them."""


REPLICA_PORTS = range(20000, 30000)
"""Where local replicas' ports come from (docs/design.md, "Ports")."""
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> range | None:
    """The kernel's ephemeral ports, or None where it does not say (not Linux)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    return range(low, high + 1)


def candidate_ports(ports: range, ephemeral: range | None) -> list[int]:
    """``ports`` less the ephemeral range (empty: let the OS choose)."""
    if ephemeral is None:
        return list(ports)
    return [p for p in ports if p not in ephemeral]


def for_this_machine() -> PortReservations:
    """The replicas' ports: ``STEADY_PORTS``'s replica part when set, else ``REPLICA_PORTS``."""
    found = port_range.from_env()
    if found is None:
        return PortReservations()
    return PortReservations(ports=found.replicas, ephemeral=range(0))


class PortsExhausted(RuntimeError):
    """No free port the controller has not handed out already."""


class PortReservations:
    """The ports handed to replicas that may not have bound them yet."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.monotonic,
        ports: range = REPLICA_PORTS,
        ephemeral: range | None = None,
    ) -> None:
        self.host = host
        self.clock = clock
        self._handed: dict[int, float] = {}
        found = ephemeral if ephemeral is not None else ephemeral_range()
        self.candidates = candidate_ports(ports, found)
        # A random start: two controllers on one machine do not walk in step.
        self._cursor = random.randrange(len(self.candidates)) if self.candidates else 0

    def take(self, count: int) -> list[int]:
        """``count`` distinct ports, free now and not handed out before."""
        now = self.clock()
        self._handed = {p: t for p, t in self._handed.items() if now - t < HOLD_S}
        ports: list[int] = []
        with contextlib.ExitStack() as held:
            for _ in range(MAX_TRIES):
                if len(ports) == count:
                    break
                port = self._next_free(held)
                if port is not None and port not in self._handed:
                    ports.append(port)
            else:
                if len(ports) < count:
                    raise PortsExhausted(f"no free port on {self.host} after {MAX_TRIES} tries")
        for port in ports:
            self._handed[port] = now
        return ports

    def _next_free(self, held: contextlib.ExitStack) -> int | None:
        """One port nobody holds now, kept bound (in ``held``) while the search
        goes on so that the next one differs; None when the candidate was busy."""
        sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        if not self.candidates:
            sock.bind((self.host, 0))
            return int(sock.getsockname()[1])
        port = self.candidates[self._cursor]
        self._cursor = (self._cursor + 1) % len(self.candidates)
        try:
            sock.bind((self.host, port))  # no SO_REUSEADDR: a port in TIME_WAIT is passed over
        except OSError:
            return None
        return port

    def release(self, port: int | None) -> None:
        """The replica on ``port`` is gone: the OS may hand it out again."""
        if port is not None:
            self._handed.pop(port, None)

    def __contains__(self, port: int) -> bool:
        return port in self._handed
