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
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable

HOLD_S = 3600.0
"""Longest a handed-out port is remembered when its replica is never stopped
through this backend (e.g. the controller restarted and adopted it: by then it
has long bound its port, and the kernel itself keeps it from anyone else)."""
MAX_TRIES = 256
"""Bound on ``bind`` calls for one replica's ports; the ephemeral range holds
thousands of ports, so reaching it means the machine is out of them."""


class PortsExhausted(RuntimeError):
    """No free port the controller has not handed out already."""


class PortReservations:
    """The ports handed to replicas that may not have bound them yet."""

    def __init__(
        self, host: str = "127.0.0.1", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.host = host
        self.clock = clock
        self._handed: dict[int, float] = {}

    def take(self, count: int) -> list[int]:
        """``count`` distinct ports, free now and not handed out before."""
        now = self.clock()
        self._handed = {p: t for p, t in self._handed.items() if now - t < HOLD_S}
        ports: list[int] = []
        with contextlib.ExitStack() as held:
            for _ in range(MAX_TRIES):
                if len(ports) == count:
                    break
                sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.bind((self.host, 0))  # kept bound: the next bind gets another port
                port = int(sock.getsockname()[1])
                if port not in self._handed:
                    ports.append(port)
            else:
                if len(ports) < count:
                    raise PortsExhausted(f"no free port on {self.host} after {MAX_TRIES} tries")
        for port in ports:
            self._handed[port] = now
        return ports

    def release(self, port: int | None) -> None:
        """The replica on ``port`` is gone: the OS may hand it out again."""
        if port is not None:
            self._handed.pop(port, None)

    def __contains__(self, port: int) -> bool:
        return port in self._handed
