"""Test helpers: run the real CLI in a temporary STEADY_HOME, drive load, find orphans."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from steadyserve.home.paths import Home
from steadyserve.wire import replica_contract as contract

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@dataclass
class Steady:
    """The ``steady`` CLI bound to one home."""

    home: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    """E.g. the backend: STEADY_BACKEND=ray and STEADY_RAY_ADDRESS."""

    @property
    def backend(self) -> str:
        return self.extra_env.get("STEADY_BACKEND", "local")

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, **self.extra_env, STEADY_HOME=str(self.home))

    def run(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "steadyserve.cli", *args],
            stdin=subprocess.DEVNULL,  # no terminal: commands that would ask need -y
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"steady {' '.join(args)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def status(self, name: str | None = None) -> dict[str, Any]:
        out = self.run("status", *([name] if name else []), "--json").stdout
        data: dict[str, Any] = json.loads(out)
        return data

    def service(self, name: str) -> dict[str, Any]:
        services = self._api_services(name)
        if services is None:
            services = self.status(name)["services"]
        return services[0]

    def _api_services(self, name: str) -> list[dict[str, Any]] | None:
        """What ``steady status NAME --json`` lists, asked of the running controller
        from this process; None when none answers (the CLI then starts one).

        Tests poll a service every 0.1 s: as a ``steady`` subprocess each poll cost
        about 0.5 s of CPU, most of a core on this two-core machine, taken from the
        controller and replicas under test. The CLI's own status is tested by the
        tests that run it."""
        where = Home(self.home)
        info = where.read_controller_info()
        if not info or not isinstance(info.get("url"), str):
            return None
        try:
            token = self.env.get("STEADY_TOKEN") or api_secret(self.home)
            request = urllib.request.Request(
                f"{info['url']}/api/v1/services?name={urllib.parse.quote(name)}",
                headers={"Authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                services = json.loads(response.read())["services"]
        except (OSError, ValueError, KeyError):
            return None
        return services if isinstance(services, list) else None

    def wait_for(
        self, name: str, predicate: Any, timeout: float = 60, what: str = ""
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        svc: dict[str, Any] = {}
        while time.monotonic() < deadline:
            svc = self.service(name)
            if predicate(svc):
                return svc
            time.sleep(0.1)
        raise AssertionError(
            f"timed out waiting for {what or predicate}: {json.dumps(svc, indent=1)}"
        )


def processes_of_home(home: Path) -> list[psutil.Process]:
    """Every live process of ``home``: started with STEADY_HOME=home (controller,
    LBs) or carrying a replica tag of this home (replicas and all they started)."""
    marker = f"{home}"
    resolved = home.expanduser().resolve()  # what the controller names its home by
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            tag = env.get(contract.REPLICA_TAG)
            if env.get("STEADY_HOME") in (marker, str(resolved)) or (
                tag is not None and contract.tag_of_home(tag, resolved)
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def api_secret(home: Path) -> str:
    """The secret the controller of ``home`` requires when STEADY_TOKEN is not set,
    derived here as docs/security.md says (an HMAC of ``control.key``), not by
    importing the code under test."""
    key = bytes.fromhex((home / "control.key").read_text().strip())
    return hmac.new(key, b"api", hashlib.sha256).hexdigest()


def api_headers(home: Path) -> dict[str, str]:
    """What a test sends to call the controller's API directly, as the home's owner."""
    return {"Authorization": f"Bearer {os.environ.get('STEADY_TOKEN') or api_secret(home)}"}


def http_get(port: int, path: str = "/", timeout: float = 5.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@dataclass
class LoadClient:
    """A bounded background client: GETs in a loop, counting every failure.

    Stops after ``max_requests`` or ``max_seconds`` or ``stop()``, whichever first.
    """

    port: int
    path: str = "/"
    method: str = "GET"
    body: bytes | None = None  # a POST is never retried by the load balancer
    max_requests: int = 100_000
    max_seconds: float = 120.0
    sent: int = 0
    failed: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    bodies: list[tuple[float, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> LoadClient:
        self._thread.start()
        return self

    def stop(self) -> LoadClient:
        self._stop.set()
        self._thread.join(timeout=30)
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        conn: http.client.HTTPConnection | None = None
        while not self._stop.is_set() and self.sent < self.max_requests:
            if time.monotonic() > deadline:
                break
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            self.sent += 1
            started = time.time()
            try:
                conn.request(self.method, self.path, body=self.body)
                resp = conn.getresponse()
                body = resp.read()
                self.statuses[resp.status] += 1
                if resp.status != 200:
                    self.failed += 1
                else:
                    self.bodies.append((started, body))
            except (OSError, http.client.HTTPException) as exc:
                self.failed += 1
                self.errors[type(exc).__name__] += 1
                conn.close()
                conn = None
            time.sleep(0.002)
        if conn is not None:
            conn.close()

    def summary(self) -> str:
        return (
            f"requests sent={self.sent} failed={self.failed} "
            f"statuses={dict(self.statuses)} errors={dict(self.errors)}"
        )
