"""How much of a replica's direct throughput the load balancer keeps.

Starts hello replicas (bench/hello_replica.py) and a load balancer with
``--static-routes`` on 127.0.0.1, then runs wrk directly against one replica and
through the load balancer at each connection count, in the same run, and prints:

    target  replicas  connections  req/s  p50  p99  share of direct

    python bench/lb_overhead.py --duration 5 --replicas 1

Everything it starts is stopped at the end (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass
class Result:
    target: str
    connections: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: str


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


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        return float("nan")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[m.group(2)]
    return float(m.group(1)) * scale


def run_wrk(url: str, connections: int, duration: float, threads: int) -> Result:
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 30,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    errors = []
    m = re.search(r"Socket errors: (.*)", out)
    if m:
        errors.append(m.group(1).strip())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors.append(f"non-2xx {m.group(1)}")
    return Result(url, connections, rps, p50, p99, "; ".join(errors))


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    p.add_argument("--replicas", type=int, default=1, choices=(1, 2))
    p.add_argument("--connections", default="1,16,64")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1,
                   help="alternate direct/LB runs this many times; report the medians")
    p.add_argument("--policy", default="least_load")
    p.add_argument("--replica-loop", default="uvloop", choices=("uvloop", "asyncio"),
                   help="event loop of the hello replicas")
    p.add_argument("--replica-server", default="protocol", choices=("protocol", "aiohttp"),
                   help="protocol: the fastest Python replica; aiohttp: a typical one")
    p.add_argument("--keep-logs", action="store_true")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not found on PATH", file=sys.stderr)
        return 1

    tmp = Path(tempfile.mkdtemp(prefix="steady-lb-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    env_python = sys.executable
    try:
        ports = [free_port() for _ in range(args.replicas)]
        for i, port in enumerate(ports):
            procs.append(start([env_python, str(HERE / "hello_replica.py"), "--port", str(port),
                                "--loop", args.replica_loop, "--server", args.replica_server],
                               tmp / f"replica{i}.log"))
        lb_port = free_port()
        routes = ",".join(f"127.0.0.1:{port}" for port in ports)
        procs.append(start(
            [env_python, "-m", "steadyserve.lb", "--service", "bench", "--port", str(lb_port),
             "--home", str(tmp / "home"), "--static-routes", routes, "--policy", args.policy,
             "--max-ongoing", "1000"],
            tmp / "lb.log",
        ))
        for port in (*ports, lb_port):
            wait_port(port)
        direct = f"http://127.0.0.1:{ports[0]}/"
        via_lb = f"http://127.0.0.1:{lb_port}/"
        results: list[tuple[Result, Result]] = []
        for c in (int(x) for x in args.connections.split(",")):
            run_wrk(via_lb, c, 1, args.threads)  # warm the pool
            ds, lbs = [], []
            for _ in range(args.rounds):
                ds.append(run_wrk(direct, c, args.duration, args.threads))
                lbs.append(run_wrk(via_lb, c, args.duration, args.threads))
            results.append((_median(ds), _median(lbs)))
        lb_rss = _rss_mb(procs[-1].pid)
    finally:
        for proc in reversed(procs):
            stop(proc)
        if not args.keep_logs:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"wrk -t{args.threads}, {args.duration:g}s per run, median of {args.rounds}, "
          f"{args.replicas} hello replica(s) "
          f"({args.replica_server} on {args.replica_loop}), LB policy {args.policy}, "
          f"{os.cpu_count()} cores")
    header = f"{'target':<8} {'conns':>5} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'share':>7}"
    print(header + "  added p50 ms / errors")
    print("-" * (len(header) + 24))
    for d, lb in results:
        print(f"{'direct':<8} {d.connections:>5} {d.rps:>10.0f} {d.p50_ms:>8.3f} {d.p99_ms:>8.3f}"
              f" {'100%':>7}  {d.errors}")
        share = lb.rps / d.rps * 100 if d.rps else float("nan")
        print(f"{'lb':<8} {lb.connections:>5} {lb.rps:>10.0f} {lb.p50_ms:>8.3f} {lb.p99_ms:>8.3f}"
              f" {share:>6.0f}%  +{lb.p50_ms - d.p50_ms:.3f} {lb.errors}")
    if lb_rss is not None:
        print(f"load balancer RSS after the runs: {lb_rss:.1f} MB")
    return 0


def _median(runs: list[Result]) -> Result:
    """The run with the median req/s (its latencies come with it)."""
    return sorted(runs, key=lambda r: r.rps)[len(runs) // 2]


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


if __name__ == "__main__":
    sys.exit(main())
