"""Several load-balancer processes on one endpoint (``service.load_balancer.workers``).

One Python process proxies on one core; to use more, N worker processes each
accept on their own listening socket bound to the same port with SO_REUSEPORT,
and the kernel spreads new connections over them by a hash of the client's
address and port. Each worker is a complete load balancer: it polls the route
table and reports its counts with its own id (the controller drains a replica
only when every worker has acknowledged a table without it, controller/routes.py)
and balances by its own in-flight counts.

This module is the supervisor that ``python -m steadyserve.lb --workers N`` runs:
it holds the N sockets (bound here, or inherited from the controller, which keeps
them open so connections wait in a socket's backlog while its worker restarts),
starts one worker per socket, restarts a worker that dies, and on SIGTERM passes
the signal on and waits for every worker to drain. Workers share its process
group, so killing the group stops them all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

from steadyserve.lb import shared_load
from steadyserve.wire.lb_process import reuseport_socket

RESTART_BACKOFF_S = 0.5
POLL_S = 0.1


def bind_all(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` sockets on one port (port 0: the first one's port)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sockets.append(reuseport_socket(host, port))
            port = int(sockets[0].getsockname()[1])
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Supervisor:
    """Starts, restarts and stops the worker processes."""

    def __init__(
        self, argv: Sequence[str], fds: Sequence[int], workers: int, metrics_port: int
    ) -> None:
        self.argv = list(argv)
        self.fds = list(fds)
        self.shared_fd = shared_load.create(workers)  # in-flight counts of every worker
        self.metrics_port = metrics_port
        self.children: list[subprocess.Popen[bytes] | None] = [None] * workers
        self.started_at = [0.0] * workers
        self.stopping = False
        self.signals = 0

    def spawn(self, index: int) -> None:
        fds = self.fds[index :: len(self.children)]  # more sockets than workers: several each
        listen = ",".join(map(str, fds))
        extra = ["--workers", "1", "--worker-of", str(os.getpid()), "--listen-fd", listen]
        extra += ["--shared-load", f"{self.shared_fd}:{index}:{len(self.children)}"]
        if self.metrics_port:
            extra += ["--metrics-port", str(self.metrics_port + index)]
        self.started_at[index] = time.monotonic()
        self.children[index] = subprocess.Popen(
            [sys.executable, "-m", "steadyserve.lb", *self.argv, *extra],
            pass_fds=(*fds, self.shared_fd),
            stdin=subprocess.DEVNULL,
        )

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        self.stopping = True
        for child in self.children:
            if child is not None and child.poll() is None:
                with contextlib.suppress(OSError):
                    child.send_signal(signal.SIGKILL if self.signals > 1 else signal.SIGTERM)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)
        for i in range(len(self.children)):
            self.spawn(i)
        while True:
            alive = 0
            for i, child in enumerate(self.children):
                if child is not None and child.poll() is None:
                    alive += 1
                elif not self.stopping and (
                    time.monotonic() - self.started_at[i] >= RESTART_BACKOFF_S
                ):
                    code = None if child is None else child.returncode
                    print(f"steady-lb: worker {i} exited ({code}); restarting", flush=True)
                    self.spawn(i)
                    alive += 1
            if self.stopping and not alive:
                return 0
            time.sleep(POLL_S)


def supervise(
    argv: Sequence[str], fds: Sequence[int], host: str, port: int, workers: int, metrics_port: int
) -> int:
    """Run ``workers`` load balancers on ``fds`` (or on sockets bound here)."""
    sockets: list[socket.socket] = []
    if not fds:
        sockets = bind_all(host, port, workers)
        fds = [s.fileno() for s in sockets]
        port = int(sockets[0].getsockname()[1])
    print(
        f"steady-lb: {workers} workers listening on http://{host}:{port} (pid {os.getpid()})",
        flush=True,
    )
    return Supervisor(argv, fds, workers, metrics_port).run()
