"""Run ``python -m steadyserve.replica`` as a real process on 127.0.0.1, and always
clean it up (own session, SIGKILL to its group if SIGTERM was not enough)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
STARTUP_S = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    """Poll ``predicate`` (bounded in time); fail the test with ``what`` if it never holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.02)


def request(
    port: int, method: str = "GET", path: str = "/", body: Any = None, timeout: float = 10.0
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": "application/json"}
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def refuses(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2):
            return False
    except OSError:
        return True


class Replica:
    """One runner process in ``workdir``, with its app and control ports."""

    def __init__(
        self,
        workdir: Path,
        import_path: str,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        log_dir: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.control_port = free_port()
        logs = log_dir or workdir
        self.stdout_path = logs / f"replica-{self.port}.out"
        self.stderr_path = logs / f"replica-{self.port}.err"
        full_env = {
            **os.environ,
            "PORT": str(self.port),
            "STEADY_CONTROL_PORT": str(self.control_port),
            "STEADY_REPLICA_ID": "1",
            "STEADY_SERVICE_NAME": "test",
            "STEADY_SERVICE_VERSION": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        }
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "steadyserve.replica", *args, import_path],
                cwd=workdir,
                env=full_env,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def control(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, raw = request(self.control_port, method, path, body)
        return status, json.loads(raw)

    def app(self, path: str = "/", method: str = "GET", body: Any = None) -> tuple[int, bytes]:
        return request(self.port, method, path, body)

    def health(self) -> tuple[int, Any] | None:
        """``/-/healthz``'s answer, or None while the control port does not listen."""
        try:
            return self.control("GET", "/-/healthz")
        except OSError:
            assert self.proc.poll() is None, f"replica exited:\n{self.stderr}"
            return None

    def wait_health(self, status: int, timeout: float = STARTUP_S) -> Any:
        answers: list[tuple[int, Any] | None] = []

        def matches() -> bool:
            answers.append(self.health())
            return answers[-1] is not None and answers[-1][0] == status

        wait_until(matches, timeout, f"/-/healthz {status} (last: {answers[-1:]})")
        last = answers[-1]
        assert last is not None
        return last[1]

    def wait_exit(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        """SIGTERM, then SIGKILL to the group if it is still there after 10 s."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def __enter__(self) -> Replica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
