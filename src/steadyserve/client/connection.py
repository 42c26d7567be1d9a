"""The way to the controller for the CLI, the SDK and the serve API: find it, start
it on demand, call its API.

Plain urllib keeps every ``steady`` command quick to start; the controller's
answers carry one-line errors that map to exit codes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from steadyserve import oneline
from steadyserve.backends import BACKEND_ENV, BackendChoiceError, backend_name
from steadyserve.home import api_token
from steadyserve.home.paths import Home

START_TIMEOUT_S = 30.0


class CommandError(Exception):
    """A failure to report in one line with an exit code (2 bad input, 1 other)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _call(
    home: Home, url: str, method: str, path: str, body: Any, timeout: float
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method)
    for name, value in api_token.header(home.root).items():
        request.add_header(name, value)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, {"error": raw.decode(errors="replace").strip() or exc.reason}


def controller_alive(home: Home) -> dict[str, Any] | None:
    """The running controller's info, if the recorded one answers as itself."""
    info = home.read_controller_info()
    if not info or not isinstance(info.get("url"), str):
        return None
    try:
        status, data = _call(home, info["url"], "GET", "/api/v1/health", None, timeout=2.0)
    except (OSError, ValueError):
        return None
    if status == 401:
        raise CommandError(
            f"the controller at {info['url']} refused this command: run it as the owner of"
            f" {home.root}, with the controller's STEADY_TOKEN if it was started with one",
            2,
        )
    if status != 200 or not isinstance(data, dict) or data.get("pid") != info.get("pid"):
        return None
    return data


def _check_backend(info: dict[str, Any]) -> dict[str, Any]:
    """A running controller keeps the backend it started with: a command asking for
    another one (STEADY_BACKEND) is refused rather than silently run elsewhere."""
    try:
        wanted = backend_name()
    except BackendChoiceError as exc:
        raise CommandError(str(exc), 2) from None
    running = info.get("backend", "local")
    if os.environ.get(BACKEND_ENV) and wanted != running:
        raise CommandError(
            f"{BACKEND_ENV}={wanted}, but the controller of this home runs the {running}"
            " backend; stop it first (steady controller stop)",
            2,
        )
    return info


def _error_line(log_path: Path) -> str | None:
    """The one-line reason a controller gave for not starting (its log's last line)."""
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return None
    return lines[-1].removeprefix("error: ") if lines and lines[-1].startswith("error: ") else None


def start_controller(home: Home) -> dict[str, Any]:
    """Start the controller in its own session and wait until it answers."""
    home.ensure()
    info = controller_alive(home)
    if info:
        return _check_backend(info)
    try:
        backend_name()
    except BackendChoiceError as exc:
        raise CommandError(str(exc), 2) from None
    log_path = home.controller_log
    env = dict(os.environ, STEADY_HOME=str(home.root))
    with open(log_path, "ab") as log:
        os.chmod(log_path, 0o600)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "steadyserve.controller",
                "--home",
                str(home.root),
                "--on-demand",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = controller_alive(home)
        if info:
            return info
        code = proc.poll()
        if code == 2 and (reason := _error_line(log_path)):  # e.g. the Ray cluster is unreachable
            raise CommandError(reason, 2)
        if code not in (None, 0):
            last = oneline.file_tail(log_path, 1)  # its traceback's last line says why
            raise CommandError(f"controller failed to start (exit {code}): {last}; see {log_path}")
        time.sleep(0.05)
    raise CommandError(f"controller did not answer within {START_TIMEOUT_S:.0f}s; see {log_path}")


def stop_controller(home: Home, timeout: float = 30.0) -> bool:
    """Ask the controller to exit and wait for its process to end; False if none ran."""
    info = controller_alive(home)
    if not info:
        return False
    pid = int(info["pid"])
    with contextlib.suppress(OSError):
        _call(home, info["url"], "POST", "/api/v1/shutdown", {}, timeout=5.0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        raise CommandError(f"controller (pid {pid}) did not stop within {timeout:.0f}s")
    return True


class Client:
    """Calls the controller of one home, starting it first when needed."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            self._url = str(start_controller(self.home)["url"])
        return self._url

    def call(self, method: str, path: str, body: Any = None, timeout: float = 60.0) -> Any:
        try:
            status, data = _call(self.home, self.url, method, path, body, timeout)
        except OSError as exc:
            raise CommandError(f"cannot reach the controller at {self.url}: {exc}") from exc
        if status >= 400:
            message = data.get("error") if isinstance(data, dict) else str(data)
            raise CommandError(str(message), 2 if status in (400, 401, 404, 409) else 1)
        return data
