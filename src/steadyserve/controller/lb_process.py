"""Start, re-adopt and restart a service's load-balancer process.

The LB runs in its own process group, so a controller crash or restart never
stops traffic; the controller only watches it and restarts it on the same port.

With ``service.load_balancer.workers: N`` the LB is a supervisor of N worker
processes (lb/workers.py), one per listening socket; the controller binds those
N sockets to the endpoint's port with SO_REUSEPORT and keeps them open, so a
restarting LB (or worker) finds connections waiting in the backlogs. A changed
worker count replaces the LB: the new one starts on the sockets first, then the
old one drains. Sockets are never closed while the service runs (a socket
nobody accepts on would strand the connections the kernel hashes to it): with
fewer workers than sockets, a worker accepts on several.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections import deque

import psutil

from steadyserve.backends.processes import LocalProcess, same_process_alive, stop_group
from steadyserve.controller.clock import SYSTEM_CLOCK
from steadyserve.core.states import EventKind
from steadyserve.home.paths import Home
from steadyserve.oneline import file_tail
from steadyserve.store import ServiceRow, Store
from steadyserve.wire.lb_process import reuseport_socket, worker_count

RESTART_BACKOFF_S = 0.5
STOP_TIMEOUT_S = 10.0
FAIL_LIMIT = 3
FAIL_WINDOW_S = 10.0
"""An LB that exits this many times within this window does not start: a bad
certificate, a missing module. Restarting it every 0.5 s would only flip the
service between FAILED and CONTROLLER_INIT; the service is FAILED with the reason
instead. A crash now and then (fewer than 3 in 10 s) is still restarted."""


class LoadBalancerProcess:
    def __init__(self, home: Home, service: str, port: int) -> None:
        self.home = home
        self.service = service
        self.port = port
        self.handle: LocalProcess | None = None
        self._last_start = 0.0
        # The endpoint's listening sockets (one per worker), shared with the LB
        # process: while a crashed LB restarts, new connections wait in their
        # backlogs instead of being refused.
        self.listeners: list[socket.socket] = []
        self.workers: int | None = None  # of the running LB (None: adopted, not known yet)
        self._replacing: set[asyncio.Task[None]] = set()
        # service.tls's files for the LB process (wire/lb_process.py env_for).
        self.tls_env: dict[str, str] = {}
        self._exits: deque[float] = deque(maxlen=FAIL_LIMIT)
        self.failure: str | None = None
        """Why the LB is no longer restarted (see FAIL_LIMIT), or None."""

    @property
    def running(self) -> bool:
        return self.handle is not None and self.handle.exit_code() is None

    def adopt(self, pid: int | None, create_time: float | None) -> None:
        if pid is None:
            return
        if same_process_alive(pid, create_time):
            self.handle = LocalProcess(pid, create_time, self.port)
            self.workers = _workers_of(pid)

    def detach(self) -> None:
        self.handle = None
        self._close_listener()

    def _close_listener(self) -> None:
        while self.listeners:
            self.listeners.pop().close()

    def _listen(self, count: int) -> list[socket.socket]:
        while len(self.listeners) < count:
            self.listeners.append(reuseport_socket("127.0.0.1", self.port))
        return self.listeners

    def supervise(self, store: Store, row: ServiceRow, workers: int | str = 1) -> None:
        """Start the LB if it is not running (first start, or it died), or replace
        it when ``service.load_balancer.workers`` changed."""
        want = worker_count(workers)
        if self.running:
            if self.workers is not None and self.workers != want and not self._replacing:
                self._replace(store, row, want)
            return
        if self.failure is not None:
            return
        if SYSTEM_CLOCK.now() - self._last_start < RESTART_BACKOFF_S:
            return
        code = self.handle.exit_code() if self.handle is not None else None
        if self.handle is not None and self._gave_up(store, code):
            return
        try:
            listeners = self._listen(want)
        except OSError as exc:
            store.add_event(
                self.service,
                None,
                None,
                EventKind.LB_PORT_BUSY,
                f"cannot listen on port {self.port}: {exc.strerror}; retrying",
            )
            self._last_start = SYSTEM_CLOCK.now()
            return
        if self.handle is not None:
            store.add_event(
                self.service,
                None,
                EventKind.LB_RUNNING,
                EventKind.LB_RESTARTING,
                f"load balancer exited with code {code}; restarting on port {self.port}",
            )
        self.start(listeners, want)
        self._record(store, row)

    def _gave_up(self, store: Store, code: int | None) -> bool:
        """Count this exit; on the FAIL_LIMIT-th within FAIL_WINDOW_S, stop trying."""
        now = SYSTEM_CLOCK.now()
        self._exits.append(now)
        if len(self._exits) < FAIL_LIMIT or now - self._exits[0] > FAIL_WINDOW_S:
            return False
        cause = file_tail(self.home.lb_log(self.service), lines=1)
        self.failure = (
            f"load balancer exited {FAIL_LIMIT} times within {FAIL_WINDOW_S:.0f}s"
            f" (last exit code {code}): {cause}"
        )
        store.add_event(self.service, None, EventKind.LB_RUNNING, EventKind.LB_FAILED, self.failure)
        return True

    def _record(self, store: Store, row: ServiceRow) -> None:
        assert self.handle is not None
        store.set_service_fields(
            self.service, lb_pid=self.handle.pid, lb_create_time=self.handle.create_time
        )
        row.lb_pid = self.handle.pid
        row.lb_create_time = self.handle.create_time

    def _replace(self, store: Store, row: ServiceRow, want: int) -> None:
        """Start an LB with ``want`` workers, then drain the old one."""
        try:
            listeners = self._listen(want)
        except OSError as exc:
            store.add_event(
                self.service,
                None,
                None,
                EventKind.LB_PORT_BUSY,
                f"cannot add a worker socket: {exc}",
            )
            return
        old, before = self.handle, self.workers
        self.start(listeners, want)
        self._record(store, row)
        store.add_event(
            self.service,
            None,
            EventKind.LB_RUNNING,
            EventKind.LB_RESTARTING,
            f"load balancer workers {before} -> {want}: new LB started, the old one drains",
        )
        task = asyncio.get_running_loop().create_task(self._retire(old))
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _retire(self, old: LocalProcess | None) -> None:
        if old is not None:
            await stop_group(old, STOP_TIMEOUT_S)

    def start(self, listeners: list[socket.socket], workers: int = 1) -> None:
        self._last_start = SYSTEM_CLOCK.now()
        self.workers = workers
        fds = [str(s.fileno()) for s in listeners]
        log_path = self.home.lb_log(self.service)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, STEADY_HOME=str(self.home.root))
        env.update(self.tls_env)
        with open(log_path, "ab") as log:
            os.chmod(log_path, 0o600)
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "steadyserve.lb",
                    "--service",
                    self.service,
                    "--port",
                    str(self.port),
                    "--home",
                    str(self.home.root),
                    "--listen-fd",
                    ",".join(fds),
                    "--workers",
                    str(workers),
                ],
                pass_fds=tuple(s.fileno() for s in listeners),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.handle = LocalProcess.of(popen, self.port)

    async def stop(self) -> None:
        """SIGTERM: the LB stops accepting and lets in-flight requests finish (bounded)."""
        if self.handle is not None:
            await stop_group(self.handle, STOP_TIMEOUT_S)
        self.handle = None
        for task in list(self._replacing):
            await task
        self._close_listener()


def _workers_of(pid: int) -> int | None:
    """How many workers an adopted LB runs (its load-balancer children; 1 if none)."""
    try:
        children = psutil.Process(pid).children()
        count = sum(1 for c in children if "steadyserve.lb" in " ".join(c.cmdline()))
    except psutil.Error:
        return None
    return count or 1
