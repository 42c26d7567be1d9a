"""Smoke-run each benchmark in bench/ with a tiny duration: it exits 0 and prints its table.

Not timed tests: nothing here asserts on a figure. The load-balancer benchmark
needs wrk (apt-get install wrk) and is skipped without it. The Ray Serve parts
run in the same invocations when ray is installed (pip install -e '.[bench]')
and a network namespace can be made (root); otherwise ``--no-ray`` skips them.
So do the nginx and HAProxy rows when those are installed (bench/setup.sh;
.ci/run installs them); without them the rows must say "not installed".
Each run also checks that it left no process of its temporary STEADY_HOMEs
(or proxy config dirs) behind, and, with matplotlib installed, that it wrote
its plot.
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
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"])
HAVE_NGINX = shutil.which("nginx", path=SBIN) is not None
HAVE_HAPROXY = shutil.which("haproxy", path=SBIN) is not None
HAVE_WRK = shutil.which("wrk") is not None
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
# Ray Serve, not just Ray (the Ray backend's tests install ray without serve).
HAVE_RAY = importlib.util.find_spec("ray") is not None and (
    subprocess.run([sys.executable, "-c", "import ray.serve"], capture_output=True).returncode == 0
)
BENCH_HOME_NAME = "steady-bench-"
# bench/benchlib.py's run_proxy: the temp dir nginx and HAProxy run from
PROXY_DIR_NAMES = [f"{BENCH_HOME_NAME}{proxy}-" for proxy in ("nginx", "haproxy")]

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


def bench_processes(marker: str, scratch: str) -> list[psutil.Process]:
    """Live processes of this run: its temporary STEADY_HOMEs are made under
    ``scratch`` (the run's own TMPDIR), so the controller and LBs (which inherit
    ``marker`` in STEADY_BENCH_SMOKE_RUN), replicas (a clean environment, but a
    workdir under the home) and proxies (nginx rewrites its environment: by the
    config dir on its command line) are found there. Another run of the same
    benchmarks on the machine meanwhile has a scratch folder of its own."""
    homes = f"{scratch}/{BENCH_HOME_NAME}"
    proxies = [f"{scratch}/{name}" for name in PROXY_DIR_NAMES]
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            home = env.get("STEADY_BENCH_SMOKE_RUN") == marker
            replica = proc.cwd().startswith(homes)
            proxy = any(prefix in arg for arg in proc.cmdline() for prefix in proxies)
            if home or replica or proxy:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def run_bench(
    script: str, *args: str, out: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> str:
    started = time.time()
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    # A short folder of the run's own (unix socket paths under it stay short).
    scratch = tempfile.mkdtemp(prefix="sb")
    try:
        proc = subprocess.run(
            [sys.executable, str(BENCH / script), *args],
            env=dict(
                os.environ,
                TMPDIR=scratch,
                STEADY_BENCH_OUT=str(out),
                STEADY_BENCH_SMOKE_RUN=marker,
                **(env or {}),
            ),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=BENCH.parent,
        )
        assert proc.returncode == 0, (
            f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
        left = bench_processes(marker, scratch)
        assert not left, f"{script} left processes behind: {[p.cmdline() for p in left]}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
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
    assert "proxies side by side, uvloop hello replica" in out, out
    for name, installed in (("nginx", HAVE_NGINX), ("HAProxy", HAVE_HAPROXY)):
        lines = [line for line in out.splitlines() if line.startswith(f"{name} ")]
        if installed:
            # measured: a row per table with req/s (a version, then numbers), and the ratio
            assert any(line.split()[1][0].isdigit() and "req" not in line for line in lines), out
            assert f"SteadyServe / {name}" in out, out
            assert "failed to start" not in out and "not installed" not in out, out
        else:
            assert any("not installed (apt-get install nginx haproxy)" in line for line in lines)
    if WITH_RAY:
        assert "Ray Serve proxy" in out, out


@needs_wrk
def test_lb_overhead_reports_a_missing_or_broken_proxy_in_its_row(tmp_path: Path) -> None:
    """No haproxy, and an nginx that exits at once: both rows say why; the run still
    measures direct, the byte-relay floor and SteadyServe and exits 0."""
    fake = tmp_path / "bin"
    fake.mkdir()
    nginx = fake / "nginx"
    nginx.write_text("#!/bin/sh\necho 'nginx: [emerg] unknown directive (fake)' >&2; exit 1\n")
    nginx.chmod(0o755)
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
        "--no-sse",
        "--no-ray",
        "--proxies",
        "nginx,haproxy,floor,floor-c",
        out=tmp_path,
        timeout=300,
        env={"STEADY_BENCH_PROXY_PATH": str(fake)},
    )
    side = out.split("proxies side by side", 1)[1]
    # The floor (bench/byte_relay.py) needs neither: it relays real requests.
    floor = [line for line in side.splitlines() if line.startswith("uvloop byte relay (floor")]
    assert floor and any(cell.isdigit() for cell in floor[0].split(")")[1].split()), out
    assert "SteadyServe / uvloop byte relay" in side, out
    # floor-c compiles bench/native_floor.c: measured, or its row says why not.
    native = [line for line in side.splitlines() if line.startswith("C-protocol byte relay")]
    assert native, out
    measured = any(cell.isdigit() for cell in native[0].split(")")[1].split())
    assert measured or "cannot compile native_floor.c" in native[0], out
    assert "HAProxy" in side and "not installed (apt-get install nginx haproxy)" in side, out
    assert "failed to start (exited 1): nginx: [emerg] unknown directive (fake)" in side, out
    assert "SteadyServe LB" in side and "SteadyServe / nginx" not in side, out
    assert "SteadyServe / HAProxy" not in side, out


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


def test_long_streams_prints_its_table(tmp_path: Path) -> None:
    out = run_bench(
        "long_streams.py",
        "--duration",
        "0.5",
        "--interval",
        "0.05",
        "--streams",
        "2",
        out=tmp_path,
        timeout=300,
    )
    for change in ("rolling", "blue_green", "scale_down"):
        assert change in out
    assert "old replicas linger s" in out


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


def test_llm_routing_prints_its_tables(tmp_path: Path) -> None:
    out = run_bench("llm_routing.py", "--smoke", out=tmp_path)
    for workload in ("## chat", "## shared", "## uniform"):
        assert workload in out
    for row in ("least_load", "prefix_affinity", "oracle"):
        assert row in out
    assert "TTFT p50 ms" in out and "cache hit" in out


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ([], "--llama-server"),
        (["--llama-server", "/nonexistent/llama-server"], "--llama-server"),
        (["--llama-server", sys.executable, "--rows", "power_of_two"], "--rows"),
        (["--llama-server", sys.executable, "--workloads", "chats"], "--workloads"),
    ],
)
def test_llm_routing_real_engine_rejects_bad_options(flags: list[str], field: str) -> None:
    """The real-engine mode (--engine llama) needs a llama-server build, so CI only
    checks its options: one line naming the field, exit 2, before any engine starts."""
    before = set(Path(tempfile.gettempdir()).glob("steady-bench-llama-*"))
    proc = subprocess.run(
        [sys.executable, str(BENCH / "llm_routing.py"), "--engine", "llama", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
    assert set(Path(tempfile.gettempdir()).glob("steady-bench-llama-*")) == before


def test_sandbox_cost_prints_its_tables(tmp_path: Path) -> None:
    from steadyserve.backends import netns, sandbox

    for why in (netns.unavailable(), sandbox.unavailable()):
        if why is not None:
            pytest.skip(f"no sandboxed isolation here: {why}")
    # Starts only: the load balancer rows need three homes (about 40 s here).
    out = run_bench("sandbox_cost.py", "--starts", "1", "--no-lb", out=tmp_path)
    for kind in ("host network", "network only", "sandbox"):
        assert kind in out
    assert "start p50 ms" in out
