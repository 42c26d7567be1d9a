"""How the load balancer's throughput scales with ``service.load_balancer.workers``.

A hello replica (bench/hello_replica.py, uvloop) is pinned with ``taskset`` to
one set of CPUs and the load balancer (``python -m steadyserve.lb --workers N``
with ``--static-routes`` to that replica, so no controller runs) to another; wrk
(-t1) drives the endpoint. For each layout it prints req/s and p50/p99, next to
the replica reached directly (the ceiling).

    python bench/lb_workers.py --duration 5
    python bench/lb_workers.py --layouts "0:1:1,0:1:2,0:0-1:2" --connections 64

A layout is ``REPLICA_CPUS:LB_CPUS:WORKERS``. On a machine with few cores the
numbers are what one core (or two shared ones) gives; docs/load-balancer.md says
what to expect with more. Everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib import (
    HERE,
    ROOT,
    WrkResult,
    cpu_seconds,
    fmt,
    free_port,
    have_wrk,
    machine_line,
    run_wrk,
    stop_process,
    table,
    wait_port,
)

DEFAULT_LAYOUTS = "0:1:1,0:1:2,0:0-1:1,0:0-1:2,0-1:0-1:1,0-1:0-1:2,0-1:0-1:4"


@contextmanager
def pinned(cpus: str, argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        ["taskset", "-c", cpus, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        stop_process(proc)


def replica(cpus: str, port: int) -> Any:
    return pinned(cpus, [sys.executable, str(HERE / "hello_replica.py"), "--port", str(port)])


def lb(cpus: str, port: int, upstream: int, workers: int, home: Path) -> Any:
    return pinned(
        cpus,
        [
            sys.executable,
            "-m",
            "steadyserve.lb",
            "--service",
            "bench",
            "--port",
            str(port),
            "--home",
            str(home),
            "--static-routes",
            f"127.0.0.1:{upstream}",
            "--workers",
            str(workers),
        ],
    )


def measure(
    url: str, connections: int, duration: float, rounds: int, pid: int | None = None
) -> WrkResult:
    """The best of ``rounds`` wrk runs (the machine is shared: the best is the least
    disturbed), with the CPU time per request of ``pid`` and its children (the LB
    and its workers): unlike req/s, that does not depend on what else runs."""
    results = []
    for _ in range(rounds):
        before = cpu_seconds([pid]) if pid is not None else 0.0
        result = run_wrk(url, connections, duration)
        if pid is not None and result.requests:
            result.proxy_us = (cpu_seconds([pid]) - before) / result.requests * 1e6
        results.append(result)
    return max(results, key=lambda r: r.rps)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--layouts", default=DEFAULT_LAYOUTS, help="REPLICA_CPUS:LB_CPUS:WORKERS,...")
    args = p.parse_args()
    if not have_wrk():
        print("wrk is not installed (bench/setup.sh)", file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    os.environ["STEADY_LB_LOG_LEVEL"] = "WARNING"
    print(machine_line())
    rows = []
    with tempfile.TemporaryDirectory(prefix="steady-bench-") as tmp:
        for layout in args.layouts.split(","):
            replica_cpus, lb_cpus, workers_text = layout.split(":")
            workers = int(workers_text)
            up, front = free_port(), free_port()
            with replica(replica_cpus, up):
                wait_port(up)
                direct = measure(f"http://127.0.0.1:{up}/", args.connections, args.duration, 1)
                with lb(lb_cpus, front, up, workers, Path(tmp)) as proc:
                    wait_port(front)
                    result = measure(
                        f"http://127.0.0.1:{front}/",
                        args.connections,
                        args.duration,
                        args.rounds,
                        proc.pid,
                    )
            rows.append(
                [
                    replica_cpus,
                    lb_cpus,
                    str(workers),
                    fmt(result.rps, 0),
                    fmt(result.p50_ms),
                    fmt(result.p99_ms),
                    fmt(direct.rps, 0),
                    f"{result.rps / direct.rps:.0%}" if direct.rps else "-",
                    fmt(result.proxy_us, 1),
                    result.errors or "-",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    print(
        table(
            [
                "replica CPUs",
                "LB CPUs",
                "workers",
                "req/s",
                "p50 ms",
                "p99 ms",
                "direct req/s",
                "LB / direct",
                "LB CPU us/req",
                "errors",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
