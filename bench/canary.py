"""A canary's timeline: share of traffic per version, the canary's error rate, the abort.

A command replica answers its version; version 2 answers correctly at first and
then, ``--fail-after`` seconds after it starts, fails 30% of its requests (a
regression that shows only under real traffic). The canary walks
``10% -> pause -> 30% -> pause -> 60% -> wait for promote -> 100%`` with
``max_error_rate: 0.05`` judged every second. Closed-loop clients record every
answer (time, version, status). Reported: the share per version in each phase,
the canary's failed requests and how long after they began the abort came, the
stable version's failed requests (goal 0), and a plot of the timeline.

    python bench/canary.py [--clients 4] [--fail-after 8]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import benchlib

APP = """
import json, os, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ["STEADY_SERVICE_VERSION"]
FAIL_AFTER = float(os.environ.get("FAIL_AFTER_S", "-1"))
STARTED = time.monotonic()
LOCK = threading.Lock()
COUNT = [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        status = 200
        if self.path != "/health" and FAIL_AFTER >= 0 and time.monotonic() - STARTED > FAIL_AFTER:
            with LOCK:
                COUNT[0] += 1
                status = 500 if COUNT[0] * 30 % 100 < 30 else 200
        body = json.dumps({"version": VERSION}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

STEPS = [
    {"weight": 10},
    {"pause": 3},
    {"weight": 30},
    {"pause": 3},
    {"weight": 60},
    {"pause": {}},
    {"weight": 100},
]


def spec(workdir: Path, fail_after: float) -> dict[str, Any]:
    return {
        "name": "canary",
        "workdir": str(workdir),
        "run": "python3 app.py",
        "envs": {"FAIL_AFTER_S": str(fail_after)},
        "service": {
            "readiness_probe": {"path": "/health", "initial_delay_seconds": 30},
            "replicas": 3,
            "update_mode": "canary",
            "health_check_period_s": 0.3,
            "graceful_shutdown_wait_loop_s": 0.05,
            "graceful_shutdown_timeout_s": 5,
            "canary": {
                "steps": STEPS,
                "analysis": {"max_error_rate": 0.05, "min_requests": 20, "interval_s": 1},
            },
        },
    }


class Client(threading.Thread):
    """Closed loop: GET, record (time, version, status), repeat until stopped."""

    def __init__(self, port: int, results: list[tuple[float, str, int]], t0: float) -> None:
        super().__init__(daemon=True)
        self.port, self.results, self.t0 = port, results, t0
        self.stop = threading.Event()

    def run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while not self.stop.is_set():
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            started = time.monotonic() - self.t0
            try:
                conn.request("GET", "/")
                response = conn.getresponse()
                body = response.read()
                version = json.loads(body)["version"] if body.startswith(b"{") else "lb"
                self.results.append((started, version, response.status))
            except (OSError, http.client.HTTPException, ValueError):
                self.results.append((started, "error", 0))
                conn.close()
                conn = None
            time.sleep(0.005)
        if conn is not None:
            conn.close()


def run(home: benchlib.SteadyHome, clients: int, fail_after: float) -> dict[str, Any]:
    (home.tmp / "app").mkdir()
    (home.tmp / "app" / "app.py").write_text(APP)
    first = spec(home.tmp / "app", -1)
    home.run("up", str(home.write("v1.json", json.dumps(first))), "--wait")
    port = int(str(home.service("canary")["endpoint"]).rsplit(":", 1)[1])
    t0 = time.monotonic()
    results: list[tuple[float, str, int]] = []
    workers = [Client(port, results, t0) for _ in range(clients)]
    for w in workers:
        w.start()
    time.sleep(2.0)
    update_at = time.monotonic() - t0
    home.run(
        "update",
        "canary",
        str(home.write("v2.json", json.dumps(spec(home.tmp / "app", fail_after)))),
    )
    steps: list[tuple[float, int]] = []
    aborted_at: float | None = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        svc = home.api("/api/v1/services?name=canary")["services"][0]
        now = time.monotonic() - t0
        canary = svc.get("canary")
        if canary and (not steps or steps[-1][1] != canary["weight"]):
            steps.append((now, canary["weight"]))
        update = svc.get("update") or {}
        if update.get("status") not in (None, "IN_PROGRESS"):
            aborted_at = now if update["status"] == "FAILED" else None
            message = update.get("message", "")
            break
        time.sleep(0.1)
    else:
        message = "did not finish"
    time.sleep(2.0)
    for w in workers:
        w.stop.set()
    for w in workers:
        w.join(35)
    return {
        "results": results,
        "update_at": update_at,
        "steps": steps,
        "aborted_at": aborted_at,
        "message": message,
    }


def summary(result: dict[str, Any]) -> list[list[str]]:
    results = result["results"]
    aborted = result["aborted_at"]
    canary = [r for r in results if r[1] == "2"]
    canary_failed = [r for r in canary if r[2] != 200]
    stable_failed = [r for r in results if r[1] != "2" and r[2] != 200]
    first_failure = min((t for t, _, _ in canary_failed), default=None)
    rows = []
    phases = [*result["steps"], (aborted if aborted is not None else 1e9, 0)]
    for (start, weight), (end, _) in itertools.pairwise(phases):
        inside = [r for r in results if start <= r[0] < end]
        share = sum(1 for r in inside if r[1] == "2") / len(inside) if inside else 0.0
        rows.append(
            [f"weight {weight}%", benchlib.fmt(end - start, 1), str(len(inside)), f"{share:.1%}"]
        )
    print(benchlib.table(["phase", "seconds", "requests", "canary share"], rows))
    return [
        ["requests", str(len(results))],
        ["canary requests / failed", f"{len(canary)} / {len(canary_failed)}"],
        ["stable version failed (goal 0)", str(len(stable_failed))],
        [
            "abort after the first canary failure",
            "n/a"
            if aborted is None or first_failure is None
            else f"{aborted - first_failure:.1f} s",
        ],
        ["outcome", result["message"]],
    ]


def plot(result: dict[str, Any]) -> Path | None:
    plt = benchlib.pyplot()
    if plt is None:
        return None
    results = result["results"]
    width = 0.5
    end = max(t for t, _, _ in results)
    bins = [i * width for i in range(int(end / width) + 1)]
    share, errors = [], []
    for start in bins:
        inside = [r for r in results if start <= r[0] < start + width]
        canary = [r for r in inside if r[1] == "2"]
        share.append(100 * len(canary) / len(inside) if inside else 0.0)
        errors.append(100 * sum(1 for r in canary if r[2] != 200) / len(canary) if canary else 0.0)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.fill_between(bins, 0, share, step="post", alpha=0.4, label="version 2 (canary) share %")
    ax.fill_between(bins, share, 100, step="post", alpha=0.25, label="version 1 (stable) share %")
    ax.step(bins, errors, where="post", color="r", label="canary error rate %")
    if result["steps"]:
        ts, ws = zip(*result["steps"], strict=False)
        ax.step(
            ts, ws, where="post", color="k", linestyle=":", label="weight set by the controller"
        )
    ax.axvline(result["update_at"], color="g", linestyle="--", label="steady update --mode canary")
    if result["aborted_at"] is not None:
        ax.axvline(result["aborted_at"], color="r", linestyle="--", label="analysis aborts")
    ax.set_xlabel("seconds")
    ax.set_ylabel("percent")
    ax.set_ylim(0, 100)
    ax.set_title("Canary: traffic share per version, error rate, automatic abort")
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    out = benchlib.plot_path("canary.png")
    fig.savefig(out, dpi=90)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4, help="closed-loop clients")
    parser.add_argument(
        "--fail-after", type=float, default=8.0, help="seconds after start the canary turns bad"
    )
    args = parser.parse_args(argv)
    with benchlib.steady_home("steady-bench-canary-") as home:
        result = run(home, args.clients, args.fail_after)
    print(benchlib.table(["canary", "value"], summary(result)))
    out = plot(result)
    if out is not None:
        print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
