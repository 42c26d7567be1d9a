"""Autoscaling under a step load, and the cost of a cold start from zero.

A Python replica that answers after 0.2 s (so load shows as ongoing requests)
runs with Ray Serve's policy, ``target_ongoing_requests: 1``, 1..6 replicas.
Closed-loop clients step the load low -> 5x -> low; a sampler reads the
replica counts from the controller every 0.5 s. Reported: time from the step
to the target and to that many READY replicas, requests failed (goal 0), p99
per phase, and a plot of replicas and p99 over time.

The cold start: the same service with ``min_replicas: 0``, idle at zero; one
request; its first byte minus the replica's own start-to-ready time (from the
replica's events) is what holding at zero costs.

    python bench/autoscale.py [--low 2] [--phase 15]

Ray Serve's autoscaler on the same load needs Ray installed (see README); when
it is not, the table says so.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import threading
import time
from pathlib import Path
from typing import Any

import benchlib

SLOW_APP = """
import asyncio


class Slow:
    async def __call__(self, request):
        await asyncio.sleep(0.2)
        return "ok"
"""


def spec(workdir: Path, name: str, min_replicas: int) -> dict[str, Any]:
    return {
        "name": name,
        "import_path": "slow_app:Slow",
        "workdir": str(workdir),
        "service": {
            "readiness_probe": {"path": "/", "initial_delay_seconds": 60},
            "health_check_period_s": 0.5,
            "graceful_shutdown_wait_loop_s": 0.05,
            "graceful_shutdown_timeout_s": 5,
            "replica_policy": {
                "min_replicas": min_replicas,
                "max_replicas": 6,
                "target_ongoing_requests": 1,
                "look_back_period_s": 3,
                "upscale_delay_s": 2,
                "downscale_delay_s": 5,
                "downscale_to_zero_delay_s": 3,
            },
        },
    }


class Client(threading.Thread):
    """One closed-loop client: GET, record (start, latency, ok), repeat until stopped."""

    def __init__(self, port: int, results: list[tuple[float, float, bool]], t0: float) -> None:
        super().__init__(daemon=True)
        self.port, self.results, self.t0 = port, results, t0
        self.stop = threading.Event()

    def run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while not self.stop.is_set():
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            started = time.monotonic()
            try:
                conn.request("GET", "/")
                response = conn.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = None
            self.results.append((started - self.t0, time.monotonic() - started, ok))
        if conn is not None:
            conn.close()


def step_load(home: benchlib.SteadyHome, low: int, phase: float) -> dict[str, Any]:
    home.run("up", str(home.write("step.json", benchlib.service_yaml(spec(home.tmp, "step", 1)))))
    home.run("status", "--json")
    deadline = time.monotonic() + 60
    while home.service("step")["ready_replicas"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    port = int(str(home.service("step")["endpoint"]).rsplit(":", 1)[1])
    t0 = time.monotonic()
    results: list[tuple[float, float, bool]] = []
    samples: list[tuple[float, int, int]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            svc = home.api("/api/v1/services?name=step")["services"][0]
            samples.append((time.monotonic() - t0, svc["ready_replicas"], svc["target_replicas"]))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    clients = [Client(port, results, t0) for _ in range(low)]
    for c in clients:
        c.start()
    time.sleep(phase)
    step_at = time.monotonic() - t0
    extra = [Client(port, results, t0) for _ in range(low * 4)]
    for c in extra:
        c.start()
    time.sleep(phase * 1.5)
    drop_at = time.monotonic() - t0
    for c in extra:
        c.stop.set()
    time.sleep(phase * 1.5)
    for c in clients:
        c.stop.set()
    for c in clients + extra:
        c.join(35)
    sampling.set()
    sampler.join(5)
    peak = max(target for _, _, target in samples)
    to_target = next((t for t, _, target in samples if t >= step_at and target == peak), None)
    to_ready = next((t for t, ready, _ in samples if t >= step_at and ready == peak), None)

    def p99(start: float, end: float) -> float:
        lat = [lat for t, lat, _ in results if start <= t < end]
        return benchlib.percentile(lat, 99) * 1000

    return {
        "requests": len(results),
        "failed": sum(1 for *_, ok in results if not ok),
        "peak": peak,
        "to_target": None if to_target is None else to_target - step_at,
        "to_ready": None if to_ready is None else to_ready - step_at,
        "p99": (p99(0, step_at), p99(step_at, drop_at), p99(drop_at, 1e9)),
        "samples": samples,
        "results": results,
        "step_at": step_at,
        "drop_at": drop_at,
    }


def cold_start(home: benchlib.SteadyHome) -> dict[str, float]:
    path = home.write("cold.json", benchlib.service_yaml(spec(home.tmp, "cold", 0)))
    home.run("up", str(path), "--wait")
    port = int(str(home.service("cold")["endpoint"]).rsplit(":", 1)[1])
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/")
    response = conn.getresponse()
    first_byte = time.monotonic() - started
    response.read()
    conn.close()
    events = home.api("/api/v1/services/cold/events")["events"]
    replica = [e for e in events if e["replica_id"] is not None]
    launched = min(e["time"] for e in replica)
    ready = min(e["time"] for e in replica if e["to_status"] == "READY")
    own = ready - launched
    return {"first_byte": first_byte, "replica_start": own, "cost": first_byte - own}


def plot(result: dict[str, Any]) -> Path | None:
    plt = benchlib.pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    times = [t for t, _, _ in result["samples"]]
    ax.step(times, [r for _, r, _ in result["samples"]], where="post", label="READY replicas")
    ax.step(times, [g for _, _, g in result["samples"]], where="post", ls="--", label="target")
    ax.set_xlabel("seconds")
    ax.set_ylabel("replicas")
    ax2 = ax.twinx()
    buckets: dict[int, list[float]] = {}
    for t, lat, _ in result["results"]:
        buckets.setdefault(int(t), []).append(lat)
    secs = sorted(buckets)
    ax2.plot(secs, [benchlib.percentile(buckets[s], 99) * 1000 for s in secs], "r.", label="p99")
    ax2.set_ylabel("p99 latency (ms), per second")
    for x in (result["step_at"], result["drop_at"]):
        ax.axvline(x, color="grey", lw=0.5)
    fig.legend(loc="upper right")
    fig.tight_layout()
    out = benchlib.plot_path("autoscale.png")
    fig.savefig(out, dpi=90)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=int, default=2, help="clients in the low phases")
    parser.add_argument("--phase", type=float, default=15.0, help="seconds of the first phase")
    args = parser.parse_args(argv)
    with benchlib.steady_home("steady-bench-autoscale-") as home:
        (home.tmp / "slow_app.py").write_text(SLOW_APP)
        result = step_load(home, args.low, args.phase)
        cold = cold_start(home)
    p99 = result["p99"]
    rows = [
        [
            "SteadyServe",
            benchlib.fmt(result["to_target"], 1),
            benchlib.fmt(result["to_ready"], 1),
            f"{result['samples'][0][2]}->{result['peak']}",
            str(result["requests"]),
            str(result["failed"]),
            "/".join(benchlib.fmt(v, 0) for v in p99),
            benchlib.fmt(cold["cost"] * 1000, 0),
        ],
    ]
    if not benchlib.ray_installed():
        rows.append(["Ray Serve", "not installed here (pip install 'ray[serve]')"])
    headers = [
        "system",
        "to target s",
        "to ready s",
        "replicas",
        "requests",
        "failed",
        "p99 ms low/5x/low",
        "cold start ms",
    ]
    print(benchlib.table(headers, rows))
    print(
        f"cold start: first byte {cold['first_byte'] * 1000:.0f} ms after a request at zero;"
        f" the replica's own start-to-ready {cold['replica_start'] * 1000:.0f} ms"
    )
    out = plot(result)
    if out is not None:
        print(f"plot: {out}")
    return 0 if result["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
