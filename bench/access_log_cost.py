"""What the request log costs the load balancer: the same hello replica behind two
services, one with ``service.access_log: true``, measured with wrk in alternating
rounds (so both see the same machine load).

    python bench/access_log_cost.py --duration 5 --rounds 3

Prints req/s, latency and the LB's CPU time per request, off and on. The request
counters and latency histograms are always on; bench/lb_overhead.py measures the
load balancer with them.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from benchlib import (
    HERE,
    WrkResult,
    cpu_seconds,
    have_wrk,
    machine_line,
    run_wrk,
    service_yaml,
    steady_home,
    table,
)


def measure(url: str, lb_pid: int, connections: int, duration: float) -> WrkResult:
    before = cpu_seconds([lb_pid])
    result = run_wrk(url, connections, duration)
    if result.requests:
        result.lb_us = (cpu_seconds([lb_pid]) - before) / result.requests * 1e6
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3, help="runs per setting; the median is shown")
    args = p.parse_args(argv)
    if not have_wrk():
        print("wrk not found on PATH (apt-get install wrk)", file=sys.stderr)
        return 1
    results: dict[str, list[WrkResult]] = {"off": [], "on": []}
    with steady_home("steady-bench-accesslog-") as home:
        app = home.tmp / "app"
        app.mkdir()
        shutil.copy(HERE / "hello_replica.py", app / "hello_replica.py")
        targets: dict[str, tuple[str, int]] = {}
        for setting in ("off", "on"):
            spec = {
                "name": f"hello-log-{setting}",
                "service": {
                    "readiness_probe": "/",
                    "replicas": 1,
                    "health_check_period_s": 10,
                    "access_log": setting == "on",
                },
                "workdir": str(app),
                "run": f"{sys.executable} hello_replica.py --port $PORT --loop uvloop",
            }
            home.run("up", str(home.write(f"{setting}.yaml", service_yaml(spec))), "--wait")
            svc = home.service(f"hello-log-{setting}")
            port = int(str(svc["endpoint"]).rsplit(":", 1)[1])
            targets[setting] = (f"http://127.0.0.1:{port}/", int(svc["load_balancer_pid"]))
        for url, _ in targets.values():
            run_wrk(url, args.connections, 1)  # warm up
        for _ in range(args.rounds):
            for setting, (url, pid) in targets.items():
                results[setting].append(measure(url, pid, args.connections, args.duration))
        logs = (home.home / "services" / "hello-log-on").glob("access.log*")
        logged = sum(sum(1 for _ in path.open()) for path in logs)
    rows = []
    for setting, runs in results.items():
        r = sorted(runs, key=lambda x: x.rps)[len(runs) // 2]
        rows.append(
            [
                setting,
                str(args.connections),
                f"{r.rps:.0f}",
                f"{r.p50_ms:.3f}",
                f"{r.p99_ms:.3f}",
                f"{r.lb_us:.1f}",
                r.errors or "0",
            ]
        )
    print(f"wrk -t1, {args.duration:g}s per run, median of {args.rounds}; {machine_line()}")
    print(
        table(["access log", "conns", "req/s", "p50 ms", "p99 ms", "LB CPU us/req", "errors"], rows)
    )
    print(f"lines in the access log files (with rotated ones) after the runs: {logged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
