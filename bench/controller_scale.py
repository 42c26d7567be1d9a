"""How the controller grows with replicas and services, with replicas that start instantly.

Each scenario gets a fresh STEADY_HOME whose controller runs with
``STEADY_BACKEND=fake`` (src/steadyserve/backends/fake.py: every replica is the
same in-controller HTTP server answering 200, so probes, routing tables and
reconcile ticks are real while no replica process starts; each service's load
balancer is still a real process). Scenarios: one service of 10, 100 and 1000
replicas (``steady up --wait``), and 100 services of 1 replica (``steady deploy
--wait`` of one fleet file). After ``--duration`` seconds of steady state it
reads, per scenario:
  * reconcile tick p50 / max (``GET {controller}/api/v1/metrics``: the last 200
    ticks of each service, about 40 s at 5 ticks/s),
  * controller RSS and CPU (probing every ``--probe-period`` seconds),
  * the load balancers' RSS,
  * ``steady status --json`` wall time (the CLI, median of ``--status-runs``)
    and the same API call alone,
  * the time from the command to every replica READY.

    python bench/controller_scale.py --duration 45

Prints the table and writes bench/out/controller_scale.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil
from benchlib import (
    SteadyHome,
    fmt,
    machine_line,
    plot_path,
    pyplot,
    rss_mb,
    service_yaml,
    steady_home,
    table,
)


@dataclass
class Result:
    label: str
    services: int
    replicas: int  # in all
    ready_s: float
    tick_p50_ms: float
    tick_max_ms: float
    controller_rss_mb: float
    controller_cpu: float  # percent of one core
    lb_rss_mb: float  # the largest load balancer
    status_cli_ms: float
    status_api_ms: float
    status_bytes: int


Metric = Callable[[Result], float]


def one_service(name: str, replicas: int, period: float) -> dict[str, Any]:
    return {
        "name": name,
        "service": {
            "readiness_probe": "/",
            "replicas": replicas,
            "health_check_period_s": period,
            "graceful_shutdown_wait_loop_s": 0.1,
            "graceful_shutdown_timeout_s": 2,
        },
        "run": "true  # not run: STEADY_BACKEND=fake",
    }


def timed_ms(func: Any) -> float:
    started = time.perf_counter()
    func()
    return (time.perf_counter() - started) * 1000


def measure(home: SteadyHome, label: str, args: argparse.Namespace, create: list[str]) -> Result:
    started = time.perf_counter()
    home.run(*create, "--wait", "--timeout", "900", timeout=1000)
    ready_s = time.perf_counter() - started
    controller = psutil.Process(int(home.api("/api/v1/health")["pid"]))
    controller.cpu_percent()
    time.sleep(args.duration)
    cpu = controller.cpu_percent()
    metrics = home.api("/api/v1/metrics")
    per_service = list(metrics["services"].values())
    api_request = home.api_request("/api/v1/services")

    def api_get() -> int:
        with urllib.request.urlopen(api_request, timeout=60) as resp:
            return len(resp.read())

    size = api_get()
    cli_ms = statistics.median(
        timed_ms(lambda: home.run("status", "--json")) for _ in range(args.status_runs)
    )
    api_ms = statistics.median(timed_ms(api_get) for _ in range(args.status_runs))
    services = home.status()
    lbs = [rss_mb(s.get("load_balancer_pid")) for s in services]
    return Result(
        label=label,
        services=len(services),
        replicas=sum(int(s["ready_replicas"]) for s in services),
        ready_s=ready_s,
        tick_p50_ms=statistics.median(s["tick_p50_ms"] for s in per_service),
        tick_max_ms=max(s["tick_max_ms"] for s in per_service),
        controller_rss_mb=float(metrics["rss_mb"]),
        controller_cpu=cpu,
        lb_rss_mb=max((x for x in lbs if x is not None), default=float("nan")),
        status_cli_ms=cli_ms,
        status_api_ms=api_ms,
        status_bytes=size,
    )


def run_scenarios(args: argparse.Namespace) -> list[Result]:
    results = []
    env = {"STEADY_BACKEND": "fake"}
    for n in (int(x) for x in args.sizes.split(",") if x):
        with steady_home(f"steady-bench-scale{n}-", env) as home:
            path = home.write("svc.yaml", service_yaml(one_service(f"s{n}", n, args.probe_period)))
            results.append(measure(home, f"1 service x {n}", args, ["up", str(path)]))
        print(f"done: 1 service x {n} replicas", flush=True)
    if args.services:
        n = args.services
        with steady_home(f"steady-bench-scale-svc{n}-", env) as home:
            fleet = {"services": [one_service(f"s{i}", 1, args.probe_period) for i in range(n)]}
            path = home.write("fleet.yaml", service_yaml(fleet))
            results.append(measure(home, f"{n} services x 1", args, ["deploy", str(path)]))
        print(f"done: {n} services x 1 replica", flush=True)
    return results


def report(results: list[Result], args: argparse.Namespace) -> None:
    rows = [
        [
            r.label,
            str(r.replicas),
            fmt(r.ready_s),
            fmt(r.tick_p50_ms, 3),
            fmt(r.tick_max_ms, 1),
            fmt(r.controller_rss_mb, 1),
            fmt(r.controller_cpu, 0),
            fmt(r.lb_rss_mb, 1),
            fmt(r.status_cli_ms, 0),
            fmt(r.status_api_ms, 1),
            str(r.status_bytes),
        ]
        for r in results
    ]
    print(
        f"STEADY_BACKEND=fake, health_check_period_s={args.probe_period:g}, "
        f"{args.duration:g}s steady state per scenario; {machine_line()}"
    )
    print(
        table(
            [
                "scenario",
                "replicas",
                "ready s",
                "tick p50 ms",
                "tick max ms",
                "ctl RSS MB",
                "ctl CPU %",
                "LB RSS MB",
                "status CLI ms",
                "status API ms",
                "status bytes",
            ],
            rows,
        )
    )
    singles = [r for r in results if r.services == 1]
    if len(singles) >= 2:
        a, b = singles[0], singles[-1]
        k = b.replicas / a.replicas
        print(
            f"growth {a.replicas} -> {b.replicas} replicas (x{k:g}): "
            f"tick p50 x{b.tick_p50_ms / a.tick_p50_ms:.1f}, "
            f"controller RSS +{(b.controller_rss_mb - a.controller_rss_mb) * 1024 / (b.replicas - a.replicas):.0f} KB/replica, "  # noqa: E501
            f"status API x{b.status_api_ms / a.status_api_ms:.1f}, "
            f"status CLI x{b.status_cli_ms / a.status_cli_ms:.1f}"
        )
    print(
        "tick: one reconcile pass of one service (for N services: median of the services' "
        "p50s, max of their maxima); ctl CPU: % of one core while probing; "
        "LB RSS: the largest load balancer"
    )


def print_targets(results: list[Result]) -> None:
    for r in results:
        if r.services == 1 and r.replicas >= 1000:
            ok = r.tick_max_ms <= 50
            print(
                f"target: reconcile tick at {r.replicas} replicas <= 50 ms: p50 "
                f"{r.tick_p50_ms:.1f} ms, max {r.tick_max_ms:.1f} ms "
                f"({'holds' if ok else 'MISSED'})"
            )
    lb = max((r.lb_rss_mb for r in results), default=float("nan"))
    print(
        f"target: load balancer RSS <= 60 MB: largest {lb:.1f} MB "
        f"({'holds' if lb <= 60 else 'MISSED'})"
    )


def plot(results: list[Result]) -> None:
    plt = pyplot()
    if plt is None or not results:
        return
    singles = [r for r in results if r.services == 1]
    multi = [r for r in results if r.services > 1]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    panels: tuple[tuple[str, Metric, Metric | None], ...] = (
        ("reconcile tick, ms", lambda r: r.tick_p50_ms, lambda r: r.tick_max_ms),
        ("controller RSS, MB", lambda r: r.controller_rss_mb, None),
        ("status latency, ms", lambda r: r.status_cli_ms, lambda r: r.status_api_ms),
    )
    names = {0: ("tick p50", "tick max"), 1: ("RSS", ""), 2: ("steady status --json", "API")}
    for i, (ax, (title, first, second)) in enumerate(zip(axes, panels, strict=True)):
        xs = [r.replicas for r in singles]
        ax.plot(xs, [first(r) for r in singles], "o-", label=f"{names[i][0]} (1 service)")
        if second is not None:
            ax.plot(xs, [second(r) for r in singles], "s--", label=f"{names[i][1]} (1 service)")
        for r in multi:
            ax.plot([r.replicas], [first(r)], "r^", label=f"{names[i][0]} ({r.label})")
            if second is not None:
                ax.plot([r.replicas], [second(r)], "mv", label=f"{names[i][1]} ({r.label})")
        ax.set_xscale("log")
        if i != 1:  # memory grows from a fixed base: linear reads better
            ax.set_yscale("log")
        ax.set_xlabel("replicas in all")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.suptitle("Controller scale (fake backend: replicas start instantly)")
    fig.tight_layout()
    path = plot_path("controller_scale.png")
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--duration",
        type=float,
        default=45.0,
        help="seconds of steady state before measuring (the tick window is ~40 s)",
    )
    p.add_argument("--sizes", default="10,100,1000", help="replicas of the one-service runs")
    p.add_argument("--services", type=int, default=100, help="services of 1 replica (0: skip)")
    p.add_argument("--probe-period", type=float, default=2.0, help="health_check_period_s")
    p.add_argument("--status-runs", type=int, default=5)
    args = p.parse_args()
    results = run_scenarios(args)
    report(results, args)
    print_targets(results)
    plot(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
