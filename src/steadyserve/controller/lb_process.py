"""Start, re-adopt and restart a service's load-balancer process.

The LB runs in its own process group, so a controller crash or restart never
stops traffic; the controller only watches it and restarts it on the same port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from steadyserve.backends.local import LocalProcess, same_process_alive, stop_group
from steadyserve.paths import Home
from steadyserve.state import ServiceRow, Store

RESTART_BACKOFF_S = 0.5
STOP_TIMEOUT_S = 10.0


class LoadBalancerProcess:
    def __init__(self, home: Home, service: str, port: int) -> None:
        self.home = home
        self.service = service
        self.port = port
        self.handle: LocalProcess | None = None
        self._last_start = 0.0
        # The endpoint's listening socket, shared with the LB process: while a
        # crashed LB restarts, new connections wait in its backlog instead of
        # being refused.
        self.listener: socket.socket | None = None
        # skyserve hook: service.tls's files for the LB process (lb/tls.py env_for).
        self.tls_env: dict[str, str] = {}

    @property
    def running(self) -> bool:
        return self.handle is not None and self.handle.exit_code() is None

    def adopt(self, pid: int | None, create_time: float | None) -> None:
        if pid is None:
            return
        if same_process_alive(pid, create_time):
            self.handle = LocalProcess(pid, create_time, self.port)

    def detach(self) -> None:
        self.handle = None
        self._close_listener()

    def _close_listener(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def _listen(self) -> socket.socket:
        if self.listener is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", self.port))
                sock.listen(4096)
            except OSError:
                sock.close()
                raise
            self.listener = sock
        return self.listener

    def supervise(self, store: Store, row: ServiceRow) -> None:
        """Start the LB if it is not running (first start, or it died)."""
        if self.running:
            return
        if time.monotonic() - self._last_start < RESTART_BACKOFF_S:
            return
        code = self.handle.exit_code() if self.handle is not None else None
        try:
            listener = self._listen()
        except OSError as exc:
            store.add_event(
                self.service,
                None,
                None,
                "LB_PORT_BUSY",
                f"cannot listen on port {self.port}: {exc.strerror}; retrying",
            )
            self._last_start = time.monotonic()
            return
        if self.handle is not None:
            store.add_event(
                self.service,
                None,
                "LB_RUNNING",
                "LB_RESTARTING",
                f"load balancer exited with code {code}; restarting on port {self.port}",
            )
        self.start(listener)
        assert self.handle is not None
        store.update_service(
            self.service, lb_pid=self.handle.pid, lb_create_time=self.handle.create_time
        )
        row.lb_pid = self.handle.pid
        row.lb_create_time = self.handle.create_time

    def start(self, listener: socket.socket) -> None:
        self._last_start = time.monotonic()
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
                    str(listener.fileno()),
                ],
                pass_fds=(listener.fileno(),),
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
        self._close_listener()
