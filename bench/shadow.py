"""A canary's shadow step under an open-loop load: what it catches, what it lets through,
and what mirroring costs the clients.

A command replica answers a JSON order (``{"version", "items", "total"}``, plus the
time it was made as ``at`` with STAMP=1); DROP_PERCENT of its answers leave out
``total`` (counter-based, so exact). Each update walks
``shadow: 50 -> pause 10 s -> weight 100`` with ``max_shadow_diff_rate: 0.01``,
``min_shadow_compared: 200`` and ``ignore: [$.version]``, under ``--rate``
requests per second from ``bench/loadgen.py`` (open loop: a stall shows as latency):

* identical: a version whose answers equal the stable ones walks on to 100%;
* time stamp: both versions stamp their answers; the paths that differ between two
  stable answers are noise, so the version walks on;
* drops a field in 2%: aborted by the shadow step; the version of every answer
  the clients got is counted (goal: none from the new version);
* client latency, in one run: the same load on the service while a shadow step
  mirrors 50% of it (held at ``pause: {}`` once it passed), and on a twin service
  (same file and replicas, no update), in interleaved rounds (``--rounds`` of
  ``--duration`` seconds each, the order alternating ABBA), so that what else the
  machine does falls on both alike: p50/p99 pooled per condition, and the range
  of the rounds' p99.

    python bench/shadow.py [--rate 100] [--duration 10] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import benchlib
import loadgen

APP = """
import itertools, json, os, socket, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ["STEADY_SERVICE_VERSION"]
DROP = int(os.environ.get("DROP_PERCENT", "0"))
STAMP = os.environ.get("STAMP") == "1"
COUNT = itertools.count(1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # The head and the body go out in two writes: without this, Nagle's algorithm
        # and the load balancer's delayed ACK hold the body for 40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        body = {"version": VERSION, "items": [{"sku": "a", "qty": 2}], "total": 12.5}
        if self.path != "/health":
            if DROP and next(COUNT) * DROP % 100 < DROP:
                del body["total"]
            if STAMP:
                body["at"] = time.time_ns()
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

STEPS_WALK = [{"shadow": 50}, {"pause": 10}, {"weight": 100}]
STEPS_HOLD = [{"shadow": 50}, {"pause": {}}, {"weight": 100}]


def spec(
    app: Path,
    marker: str,
    drop: int = 0,
    stamp: bool = False,
    steps: Any = None,
    name: str = "web",
) -> str:
    return benchlib.service_yaml(
        {
            "name": name,
            "service": {
                "readiness_probe": "/health",
                "replicas": 2,
                "health_check_period_s": 0.5,
                "update_mode": "canary",
                "canary": {
                    "steps": steps or STEPS_WALK,
                    "analysis": {"max_shadow_diff_rate": 0.01, "min_shadow_compared": 200},
                    "shadow": {"ignore": ["$.version"]},
                },
            },
            "envs": {"DROP_PERCENT": str(drop), "STAMP": "1" if stamp else "0", "MARKER": marker},
            "run": f"{sys.executable} {app}",
        }
    )


class Load:
    """bench/loadgen.py as a subprocess, stopped with SIGTERM; its records."""

    def __init__(self, port: int, rate: float, max_seconds: float, out: Path) -> None:
        self.out = out
        self.max_seconds = max_seconds
        script = Path(__file__).parent / "loadgen.py"
        url = f"http://127.0.0.1:{port}/orders/7?token=x"
        limits = ["--rate", str(rate), "--max-seconds", str(max_seconds), "--out", str(out)]
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--url", url, *limits], stdout=subprocess.DEVNULL
        )

    def finish(self) -> list[loadgen.Record]:
        """Its records once it ran its whole time."""
        self.proc.wait(timeout=self.max_seconds + 60)
        return loadgen.load(self.out)

    def stop(self) -> list[loadgen.Record]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        return loadgen.load(self.out)


def finished(svc: dict[str, Any]) -> bool:
    return (svc.get("update") or {}).get("status") not in (None, "IN_PROGRESS")


def mirroring(svc: dict[str, Any]) -> bool:
    """A shadow step mirrors, and the new version has a READY replica to take copies."""
    new = (svc.get("update") or {}).get("to_version")
    ready = any(r["version"] == new and r["status"] == "READY" for r in svc["replicas"])
    return bool((svc.get("canary") or {}).get("mirror")) and ready


def wait(home: benchlib.SteadyHome, done: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    svc = home.service("web")
    while time.monotonic() < deadline and not done(svc):
        time.sleep(0.5)
        svc = home.service("web")
    return svc


def update(home: benchlib.SteadyHome, text: str, name: str, *extra: str) -> None:
    home.run("update", "web", str(home.write(name, text)), *extra)


def walk(
    home: benchlib.SteadyHome, port: int, rate: float, tmp: Path, label: str, text: str
) -> list[str]:
    """One update under load: its outcome, and which versions the clients got."""
    stable = str(home.service("web")["version"])
    load = Load(port, rate, 120, tmp / f"{label}.json")
    started = time.monotonic()
    update(home, text, f"{label}.yaml")
    svc = wait(home, finished, 120)
    took = time.monotonic() - started
    records = load.stop()
    row = svc.get("update") or {}
    new = str(row.get("to_version"))
    answered = Counter(r.version for r in records if r.ok)
    failed = sum(1 for r in records if not r.ok)
    message = str(row.get("message") or "")
    return [
        label,
        str(row.get("status")),
        f"{took:.0f}",
        str(len(records)),
        str(failed),
        f"{answered.get(stable, 0)} / {answered.get(new, 0)}",
        message[:110],
    ]


def latency(records: list[loadgen.Record]) -> tuple[float, float]:
    values = [r.latency_ms for r in records if r.ok]
    return benchlib.percentile(values, 50), benchlib.percentile(values, 99)


def wait_twin(home: benchlib.SteadyHome) -> int:
    """The twin's port once both its replicas are READY."""
    deadline = time.monotonic() + 120
    svc = home.service("twin")
    while time.monotonic() < deadline and svc["ready_replicas"] < 2:
        time.sleep(0.5)
        svc = home.service("twin")
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def interleaved(
    home: benchlib.SteadyHome,
    mirrored: int,
    twin: int,
    rate: float,
    seconds: float,
    rounds: int,
    tmp: Path,
) -> list[list[str]]:
    """The same load on the mirrored service and on its twin, in alternating rounds."""
    got: dict[str, list[loadgen.Record]] = {"mirroring 50%": [], "no mirroring (twin)": []}
    p99s: dict[str, list[float]] = {k: [] for k in got}
    ports = {"mirroring 50%": mirrored, "no mirroring (twin)": twin}
    order = list(got)
    for i in range(2 * rounds):
        label = order[(i + i // 2) % 2]  # A B B A A B ...
        records = Load(ports[label], rate, seconds, tmp / f"round{i}.json").finish()
        got[label] += records
        p99s[label].append(latency(records)[1])
    rows = []
    for label, records in got.items():
        p50, p99 = latency(records)
        failed = sum(1 for r in records if not r.ok)
        spread = f"{min(p99s[label]):.2f}-{max(p99s[label]):.2f}"
        rows.append([label, str(len(records)), str(failed), f"{p50:.2f}", f"{p99:.2f}", spread])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=100.0, help="client requests per second")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per latency round")
    p.add_argument("--rounds", type=int, default=6, help="latency rounds per condition")
    args = p.parse_args(argv)
    with benchlib.steady_home("steady-bench-shadow-") as home, tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        app = home.write("shadow_replica.py", APP)
        home.run("up", str(home.write("v1.yaml", spec(app, "v1"))), "--wait", "--timeout", "120")
        port = int(str(home.service("web")["endpoint"]).rsplit(":", 1)[1])
        rows = [walk(home, port, args.rate, tmp, "identical", spec(app, "id"))]
        # Time stamps on the stable version first (a plain rolling update), then a
        # canary whose answers differ from it only by their time stamps.
        update(home, spec(app, "st", stamp=True), "stamp.yaml", "--mode", "rolling")
        wait(home, finished, 120)
        rows.append(walk(home, port, args.rate, tmp, "time stamp", spec(app, "ts", stamp=True)))
        rows.append(
            walk(home, port, args.rate, tmp, "drops a field in 2%", spec(app, "d", 2, True))
        )
        print(
            benchlib.table(
                ["version", "update", "s", "requests", "failed", "stable / new answered", "why"],
                rows,
            )
        )
        home.run("up", str(home.write("twin.yaml", spec(app, "st", stamp=True, name="twin"))))
        update(home, spec(app, "held", stamp=True, steps=STEPS_HOLD), "held.yaml")
        held = wait(home, mirroring, 120)
        twin = wait_twin(home)
        lrows = interleaved(home, port, twin, args.rate, args.duration, args.rounds, tmp)
        shadow = (home.service("web").get("canary") or {}).get("shadow") or {}
        print(
            f"\nclient latency at {args.rate:g} req/s, {args.rounds} interleaved rounds of"
            f" {args.duration:g} s per condition (one run; web mirrored"
            f" {shadow.get('mirrored', '?')} copies):"
        )
        print(
            benchlib.table(
                ["condition", "requests", "failed", "p50 ms", "p99 ms", "rounds' p99 ms"], lrows
            )
        )
        if not mirroring(home.service("web")) or not mirroring(held):
            print("warning: the new version was not mirrored to throughout", file=sys.stderr)
        print(json.dumps({"shadow_at_end": shadow}, indent=1)[:2000])
        home.run("abort", "web")
    return 0


if __name__ == "__main__":
    sys.exit(main())
