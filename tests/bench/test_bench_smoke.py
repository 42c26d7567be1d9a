"""Smoke-run each benchmark in bench/ with a tiny duration: it exits 0 and prints its table.

Not timed tests: nothing here asserts on a figure. The load-balancer benchmark
needs wrk (apt-get install wrk) and is skipped without it. The Ray Serve parts
run in the same invocations when ray is installed (pip install -e '.[bench]')
and a network namespace can be made (root); otherwise ``--no-ray`` skips them.
Each run also checks that it left no process of its temporary STEADY_HOMEs
behind, and, with matplotlib installed, that it wrote its plot.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
HAVE_WRK = shutil.which("wrk") is not None
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
HAVE_RAY = importlib.util.find_spec("ray") is not None
BENCH_HOME_PREFIX = str(Path(tempfile.gettempdir()) / "steady-bench-")

needs_wrk = pytest.mark.skipif(not HAVE_WRK, reason="wrk is not installed (apt-get install wrk)")


def _netns_ok() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--net", "--fork", "--pid", "--mount-proc", "bash", "-c", "ip link set lo up"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


# The Ray Serve side runs in the same benchmark invocations when it can; else --no-ray.
WITH_RAY = HAVE_RAY and _netns_ok()
RAY_FLAGS = [] if WITH_RAY else ["--no-ray"]


def bench_processes() -> list[psutil.Process]:
    """Live processes of any benchmark's temporary STEADY_HOME: the controller and
    LBs carry STEADY_HOME; replicas (which do not) run in a workdir under it."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("STEADY_HOME", "").startswith(BENCH_HOME_PREFIX) or (
                proc.cwd().startswith(BENCH_HOME_PREFIX)
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def run_bench(script: str, *args: str, out: Path, timeout: float = 120) -> str:
    started = time.time()
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        env=dict(os.environ, STEADY_BENCH_OUT=str(out)),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=BENCH.parent,
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    left = bench_processes()
    assert not left, f"{script} left processes behind: {[p.cmdline() for p in left]}"
    if HAVE_MATPLOTLIB:
        plots = list(out.glob("*.png"))
        assert plots and all(p.stat().st_mtime >= started - 1 for p in plots), proc.stdout
    print(proc.stdout)
    return proc.stdout


@needs_wrk
def test_lb_overhead_prints_its_tables(tmp_path: Path) -> None:
    out = run_bench(
        "lb_overhead.py",
        "--duration",
        "1",
        "--connections",
        "16",
        "--kinds",
        "uvloop",
        "--replicas",
        "1",
        "--sse-events",
        "3",
        "--sse-burst",
        "50",
        *RAY_FLAGS,
        out=tmp_path,
        timeout=300,
    )
    assert "of direct" in out and "SteadyServe LB" in out
    assert "TTFB p50 ms" in out
    if WITH_RAY:
        assert "Ray Serve proxy" in out, out


def test_updates_under_load_prints_its_table(tmp_path: Path) -> None:
    out = run_bench(
        "updates_under_load.py",
        "--duration",
        "0.5",
        "--warmup",
        "0",
        "--rate",
        "50",
        *RAY_FLAGS,
        out=tmp_path,
        timeout=300,
    )
    for update in ("rolling", "blue_green", "in_place"):
        assert update in out
    assert "p50/p99 ms before" in out
    if WITH_RAY:
        assert "ray code update" in out and "ray user_config" in out, out


def test_controller_scale_prints_its_table(tmp_path: Path) -> None:
    out = run_bench(
        "controller_scale.py",
        "--duration",
        "1",
        "--sizes",
        "10",
        "--services",
        "2",
        "--status-runs",
        "1",
        out=tmp_path,
    )
    assert "1 service x 10" in out and "2 services x 1" in out
    assert "tick p50 ms" in out
