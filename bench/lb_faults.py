"""The data path's fault harness, long: thousands of requests per fault.

Runs the load balancer (``python -m steadyserve.lb``, static routes, 1 and 2
workers) in front of bench/fault_harness.py's replicas and judges every run by
the harness's rule (``may_fail``): the idle-close case at replica idle timeouts
from 50 ms to 5 s, closes at random moments, and each per-request fault (reset
or close after the head, close mid-response, stall past the request timeout,
garbage) on one replica of two. Prints, per case: requests, failures, of which
allowed, of which not (must be 0), requests of methods that are not idempotent
processed twice (must be 0), and the failures by method class. Exits 1 when any
case has a failure the rule does not allow.

    python bench/lb_faults.py                      # about 10 minutes
    python bench/lb_faults.py --duration 5 --timeouts 0.05,0.1

Every process and thread it starts is stopped at the end; 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from fault_harness import IDEMPOTENT, REQUEST_FAULTS, FaultReplica, Load, Verdict, judge, run_load

HERE = Path(__file__).resolve().parent


class LB:
    """The load balancer as a subprocess on a free port; stopped on exit."""

    def __init__(self, home: Path, routes: str, *args: str) -> None:
        self.log = open(home / f"lb-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "steadyserve.lb", "--service", "faults", "--port", "0"),
                *("--home", str(home), "--static-routes", routes, *args),
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            self.close()
            raise RuntimeError(f"the load balancer did not start: {line!r}")
        self.port = int(line.split("http://127.0.0.1:")[1].split()[0])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


def run_case(
    home: Path, fault: str, replicas: list[FaultReplica], load: Load, *lb_args: str
) -> Verdict:
    try:
        lb = LB(home, ",".join(r.address for r in replicas), *lb_args)
        try:
            results = run_load(lb.port, load)
        finally:
            lb.close()
        return judge(fault, results, replicas)
    finally:
        for r in replicas:
            r.close()


def pair(fault: str, idle_timeout: float) -> list[FaultReplica]:
    """Two replicas that both close idle connections."""
    return [FaultReplica(f"r{i}", fault, idle_timeout=idle_timeout, seed=i) for i in (0, 1)]


def one_bad(fault: str) -> list[FaultReplica]:
    """A replica that breaks a third of its requests, and a healthy one."""
    return [FaultReplica("bad", fault, rate=0.33, seed=7), FaultReplica("good")]


def classes(verdict: Verdict, results_failed: list[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(Counter(results_failed).items())) or "-"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=20.0, help="seconds per case")
    p.add_argument(
        "--timeouts",
        default="0.05,0.1,0.5,1,5",
        help="replica idle timeouts (s) of the idle-close case, comma-separated",
    )
    p.add_argument("--workers", default="1,2", help="load-balancer worker counts")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--no-request-faults", action="store_true")
    args = p.parse_args()
    timeouts = [float(t) for t in args.timeouts.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    rows: list[tuple[str, Verdict, str]] = []
    bad = False
    with tempfile.TemporaryDirectory(prefix="steady-bench-faults-") as tmp:
        home = Path(tmp)
        # (name, fault, the replicas' maker, the load, the LB's arguments)
        cases: list[tuple[str, str, Callable[[], list[FaultReplica]], Load, tuple[str, ...]]]
        cases = []
        for w in workers:
            for t in timeouts:
                # Bursts every 0.7-1.3 timeouts; more clients at long timeouts so a
                # case still sends thousands of requests.
                clients = args.clients * max(1, int(t / 0.25))
                cases.append(
                    (
                        f"idle_close {t:g}s, {w} worker(s)",
                        "idle_close",
                        partial(pair, "idle_close", t),
                        Load(
                            clients=min(clients, 64),
                            gap=(0.7 * t, 1.3 * t),
                            duration=max(args.duration, 40 * t),
                        ),
                        ("--workers", str(w)),
                    )
                )
            cases.append(
                (
                    f"random_idle_close 0.1s, {w} worker(s)",
                    "random_idle_close",
                    partial(pair, "random_idle_close", 0.1),
                    Load(clients=args.clients, gap=(0.02, 0.08), duration=args.duration),
                    ("--workers", str(w)),
                )
            )
            cases.append(
                (
                    f"idle_close 0.1s, fresh client connections, {w} worker(s)",
                    "idle_close",
                    partial(pair, "idle_close", 0.1),
                    Load(
                        clients=args.clients,
                        keep_alive=False,
                        gap=(0.07, 0.13),
                        duration=args.duration,
                    ),
                    ("--workers", str(w)),
                )
            )
        if not args.no_request_faults:
            for fault in REQUEST_FAULTS:
                cases.append(
                    (
                        f"{fault} (1 replica of 2, a third of its requests)",
                        fault,
                        partial(one_bad, fault),
                        Load(clients=args.clients, gap=(0.0, 0.02), duration=args.duration),
                        ("--request-timeout", "0.3"),
                    )
                )
        for name, fault, make, load, lb_args in cases:
            verdict = run_case(home, fault, make(), load, *lb_args)
            failed = [
                ("idempotent" if s.method in IDEMPOTENT else "other")
                + (" >hold" if s.body_bytes > 256 * 1024 else "")
                for s in load.results
                if not s.ok
            ]
            rows.append((name, verdict, classes(verdict, failed)))
            bad |= not verdict.passed
            print(
                f"{name:60s} requests {verdict.requests:6d}  failed {verdict.failed:4d}  "
                f"allowed {verdict.allowed:4d}  NOT allowed {len(verdict.unexpected):3d}  "
                f"processed twice {len(verdict.twice)}  ({rows[-1][2]})",
                flush=True,
            )
            for s in verdict.unexpected[:3]:
                print(f"    not allowed: {s}", flush=True)
    print()
    print("| case | requests | failed | allowed | not allowed | processed twice | failed by kind |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, v, kinds in rows:
        print(
            f"| {name} | {v.requests} | {v.failed} | {v.allowed} | {len(v.unexpected)} | "
            f"{len(v.twice)} | {kinds} |"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
