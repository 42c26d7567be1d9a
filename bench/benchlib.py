"""What the benchmarks share: wrk, a temporary STEADY_HOME, tables, plots, Ray's namespace.

The benchmark scripts import it as ``benchlib`` (Python puts a script's folder
first on ``sys.path``). Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"


# ports and processes ---------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except psutil.Error:
        return None


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of these processes and their children, in seconds."""
    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for p in (proc, *proc.children(recursive=True)):
                times = p.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            continue
    return total


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; only the process we started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


# statistics and tables -------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def fmt(value: float | int | str | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = [cells[0].ljust(widths[0])]
        out += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(out).rstrip()

    rule = "-" * len(line(headers))
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


# plots -----------------------------------------------------------------------
def pyplot() -> Any | None:
    """matplotlib.pyplot on the Agg backend, or None (with a note) when not installed."""
    if importlib.util.find_spec("matplotlib") is None:
        print("plot skipped: matplotlib is not installed (pip install -e '.[bench]')")
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_path(name: str) -> Path:
    """Where a plot goes: bench/out/, or $STEADY_BENCH_OUT (the smoke tests use a tmp dir)."""
    out = Path(os.environ.get("STEADY_BENCH_OUT") or OUT)
    out.mkdir(parents=True, exist_ok=True)
    return out / name


# wrk -------------------------------------------------------------------------
@dataclass
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: str
    requests: int = 0
    # CPU time per request (microseconds) of the load balancer and of the replicas, when known
    lb_us: float = math.nan
    replica_us: float = math.nan


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        return math.nan
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[m.group(2)]
    return float(m.group(1)) * scale


def parse_wrk(out: str) -> WrkResult:
    def find(pattern: str) -> str:
        m = re.search(pattern, out, re.MULTILINE)
        if m is None:
            raise RuntimeError(f"unexpected wrk output:\n{out}")
        return m.group(1)

    errors = []
    m = re.search(r"Socket errors: (.*)", out)
    if m:
        errors.append(m.group(1).strip())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors.append(f"non-2xx {m.group(1)}")
    return WrkResult(
        float(find(r"Requests/sec:\s+([\d.]+)")),
        # Anchored: a "+/- Stdev" column such as "87.50%" must not match "50%".
        _ms(find(r"^\s+50%\s+(\S+)")),
        _ms(find(r"^\s+99%\s+(\S+)")),
        "; ".join(errors),
        int(find(r"(\d+) requests in")),
    )


def wrk_seconds(duration: float) -> int:
    """wrk takes whole seconds only."""
    return max(1, round(duration))


def run_wrk(url: str, connections: int, duration: float, threads: int = 1) -> WrkResult:
    secs = wrk_seconds(duration)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{secs}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
        timeout=secs + 60,
    ).stdout
    return parse_wrk(out)


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


# SteadyServe in a temporary home ---------------------------------------------
class SteadyHome:
    """The real ``steady`` CLI bound to a fresh STEADY_HOME, cleaned up on close.

    ``extra_env`` reaches the controller too (the CLI starts it on demand),
    e.g. ``{"STEADY_BACKEND": "fake"}``.
    """

    def __init__(self, prefix: str = "steady-bench-", extra_env: dict[str, str] | None = None):
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self.home = self.tmp / "home"
        self.env = dict(os.environ, STEADY_HOME=str(self.home), **(extra_env or {}))
        self.env.pop("STEADY_TOKEN", None)

    def run(
        self, *args: str, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "steadyserve.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"steady {' '.join(args)} exited {proc.returncode}\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def status(self, *names: str) -> list[dict[str, Any]]:
        services: list[dict[str, Any]] = json.loads(self.run("status", *names, "--json").stdout)[
            "services"
        ]
        return services

    def service(self, name: str) -> dict[str, Any]:
        return self.status(name)[0]

    def controller_url(self) -> str:
        data = json.loads((self.home / "controller.json").read_text())
        return str(data["url"])

    def api(self, path: str, timeout: float = 30.0) -> Any:
        """GET the controller's API directly (no CLI start-up in the measurement)."""
        with urllib.request.urlopen(self.controller_url() + path, timeout=timeout) as resp:
            return json.loads(resp.read())

    def write(self, name: str, text: str) -> Path:
        path = self.tmp / name
        path.write_text(text)
        return path

    def processes(self) -> list[psutil.Process]:
        """Every live process started with this STEADY_HOME (controller, LBs, replicas)."""
        found = []
        marker = str(self.home)
        for proc in psutil.process_iter():
            try:
                if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if proc.environ().get("STEADY_HOME") == marker:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def close(self) -> None:
        """``steady down --all`` and ``steady controller stop``; kill what is left (by pid)."""
        if self.home.exists():
            self.run("down", "--all", check=False, timeout=300)
            self.run("controller", "stop", check=False, timeout=60)
        deadline = time.monotonic() + 10
        left = self.processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self.processes()
        for proc in left:
            print(f"warning: killing leftover pid {proc.pid}: {proc.cmdline()}", file=sys.stderr)
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def steady_home(prefix: str, extra_env: dict[str, str] | None = None) -> Iterator[SteadyHome]:
    home = SteadyHome(prefix, extra_env)
    try:
        yield home
    finally:
        home.close()


def service_yaml(fields: dict[str, Any]) -> str:
    """A service file: JSON is YAML, and needs no quoting rules."""
    return json.dumps(fields, indent=2) + "\n"


# Ray Serve, inside a network namespace with only loopback --------------------
def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def netns_problem() -> str | None:
    """Why Ray cannot be run in a loopback-only namespace here, or None if it can."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is missing (apt-get install util-linux iproute2)"
    probe = subprocess.run(
        [*NETNS_PREFIX, "ip link set lo up"], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        return f"cannot create a network namespace (needs root): {probe.stderr.strip()}"
    return None


# A new network namespace (only loopback, brought up) and a new pid namespace:
# every process Ray starts dies with the namespace's first process.
NETNS_PREFIX = ["unshare", "--net", "--fork", "--pid", "--mount-proc", "bash", "-c"]


def ray_problem() -> str | None:
    if not ray_installed():
        return "ray is not installed (pip install -e '.[bench]' installs ray[serve])"
    return netns_problem()


def run_in_netns(argv: list[str], timeout: float, log: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a fresh loopback-only network namespace (its own pids too),
    its output into ``log``. No token is needed on a loopback nobody else shares."""
    script = 'ip link set lo up && exec "$@"'
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    with open(log, "w") as out:
        return subprocess.run(
            [*NETNS_PREFIX, script, "netns", *argv],
            env=env,
            text=True,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )


# the machine -----------------------------------------------------------------
def machine_line() -> str:
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB"
