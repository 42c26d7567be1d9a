"""Calls a custom autoscaling policy function in its own subprocess, 1 s a call.

Ray Serve calls a custom ``policy_function`` inside its controller; here the
user's code never runs in the controller's process: one worker subprocess per
service (controller/policy_worker.py), started in the version's workdir, is
sent each context and answers with a replica count. The calls run on a
background thread so a slow policy never stalls the reconcile loop: the
autoscaler submits a context each tick (when no call is in flight) and takes
the latest answer when it decides. A call that takes longer than
``CALL_TIMEOUT_S`` kills the worker (the next call starts a new one); a call
that fails, or times out, is answered with an error the autoscaler turns into
an event while it keeps the current target.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from steadyserve.controller.clock import SYSTEM_CLOCK

__all__ = ["CALL_TIMEOUT_S", "START_TIMEOUT_S", "PolicyAnswer", "PolicyRunner"]

CALL_TIMEOUT_S = 1.0
"""The most one call may take."""
START_TIMEOUT_S = 10.0
"""The most starting the worker and importing the policy's module may take."""


@dataclass(frozen=True)
class PolicyAnswer:
    desired: float | None
    policy_state: dict[str, Any]
    error: str | None = None


class _Timeout(Exception):
    pass


class PolicyRunner:
    """One service's custom policy function, called in a subprocess."""

    def __init__(
        self,
        import_path: str,
        workdir: Path,
        python: str = sys.executable,
        call_timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        self.import_path = import_path
        self.workdir = workdir
        self._python = python
        self._call_timeout_s = call_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._answer: PolicyAnswer | None = None
        self._closed = False

    # the autoscaler's side --------------------------------------------------
    def submit(self, fields: dict[str, Any]) -> bool:
        """Start a call with this context unless one is in flight (then False)."""
        with self._lock:
            if self._closed or (self._thread is not None and self._thread.is_alive()):
                return False
            line = (json.dumps(fields) + "\n").encode()
            self._thread = threading.Thread(target=self._call, args=(line,), daemon=True)
            self._thread.start()
            return True

    def take(self) -> PolicyAnswer | None:
        """The answer of the last finished call, once (None if none since)."""
        with self._lock:
            answer, self._answer = self._answer, None
            return answer

    def wait(self, timeout_s: float) -> None:
        """Wait for the call in flight (tests and shutdown)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.wait(self._call_timeout_s + START_TIMEOUT_S)
        self._stop()

    # the background thread ---------------------------------------------------
    def _call(self, line: bytes) -> None:
        started = SYSTEM_CLOCK.now()
        try:
            proc = self._ensure_started()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(line)
            proc.stdin.flush()
            reply = _read_line(proc.stdout, started + self._call_timeout_s)
            answer = _parse(reply)
        except _Timeout:
            self._stop()
            answer = PolicyAnswer(
                None,
                {},
                f"{self.import_path} took longer than {self._call_timeout_s:g} s; stopped it",
            )
        except (OSError, EOFError, ValueError) as exc:
            self._stop()
            answer = PolicyAnswer(None, {}, f"{self.import_path}: the policy process failed: {exc}")
        with self._lock:
            self._answer = answer

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._proc = subprocess.Popen(
            [self._python, "-m", "steadyserve.controller.policy_worker", self.import_path],
            cwd=self.workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(self.workdir)},
        )
        assert self._proc.stdout is not None
        # The first line says the module imported (or why not: then every answer
        # repeats that error, so the worker is kept rather than restarted each tick).
        _read_line(self._proc.stdout, SYSTEM_CLOCK.now() + START_TIMEOUT_S)
        return self._proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _read_line(stream: IO[bytes], deadline: float) -> bytes:
    """One line from the worker, or :class:`_Timeout` at ``deadline``."""
    fd = stream.fileno()
    data = b""
    while b"\n" not in data:
        left = deadline - SYSTEM_CLOCK.now()
        if left <= 0:
            raise _Timeout
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            raise _Timeout
        chunk = os.read(fd, 65536)
        if not chunk:
            raise EOFError("it exited")
        data += chunk
    return data.split(b"\n", 1)[0]


def _parse(reply: bytes) -> PolicyAnswer:
    message = json.loads(reply)
    if message.get("error"):
        return PolicyAnswer(None, {}, str(message["error"]))
    return PolicyAnswer(float(message["desired"]), dict(message.get("policy_state") or {}))
