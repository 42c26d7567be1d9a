"""Long token streams through an update and a scale-down, with the default settings.

Brings up examples/http_server (2 replicas, every drain and shutdown setting at its
default) with the real ``steady up`` in a temporary STEADY_HOME, and for each of
  1. rolling     (an env change: new replicas)
  2. blue_green  (another env change, --mode blue_green)
  3. scale_down  (replicas 2 -> 1, in place)
opens ``--streams`` SSE streams of ``--duration`` seconds (a token every
``--interval`` s, as an LLM engine streams them) through the load balancer, runs
the real ``steady update --wait`` once every stream has its first token, and
reports: how long the update took (command to SUCCEEDED), how long the old
replicas lingered after it (draining their streams; ``steady status`` polled
through the API), and how many chunks each stream received of those sent.

    python bench/long_streams.py                     # 4 streams of 60 s: about 3.5 min
    PYTHONPATH=/path/to/other/src python bench/long_streams.py   # the same on other code

Writes bench/out/long_streams.png: the chunks each stream received over time,
with the moments the update returned and the old replicas were gone.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import (
    ROOT,
    SteadyHome,
    fmt,
    machine_line,
    plot_path,
    pyplot,
    service_yaml,
    steady_home,
    table,
)

import steadyserve

NAME = "chat"


class Stream(threading.Thread):
    """One client reading a token stream to its end (or its cut)."""

    def __init__(self, port: int, tokens: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.port, self.path = port, f"/stream?n={tokens}&interval={interval}"
        self.first = threading.Event()
        self.received = 0
        self.arrivals: list[float] = []  # time.time() of each chunk
        self.ended_at = 0.0

    def run(self) -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.request("GET", self.path)
            response = conn.getresponse()
            while line := response.readline():
                if line.startswith(b"data: "):
                    self.received += 1
                    self.arrivals.append(time.time())
                    self.first.set()
            conn.close()
        except (OSError, http.client.HTTPException):
            pass
        finally:
            self.ended_at = time.time()
            self.first.set()


@dataclass
class Result:
    name: str
    update_s: float
    linger_s: float
    received: list[int]
    sent: int
    stream_end_s: float  # from the command to the last stream's end
    arrivals: list[list[float]]  # per stream, seconds from the command to each chunk


def spec(app: Path, rev: str, replicas: int) -> dict[str, Any]:
    """Nothing about draining or shutdown is set: the defaults are what is measured."""
    return {
        "name": NAME,
        "service": {"readiness_probe": "/health", "replicas": replicas},
        "workdir": str(app),
        "envs": {"BENCH_REV": rev},
        "run": f"{sys.executable} server.py",
    }


def live(home: SteadyHome) -> list[dict[str, Any]]:
    services = home.api(f"/api/v1/services?name={NAME}")["services"]
    return list(services[0]["replicas"])


def scenario(
    args: argparse.Namespace, home: SteadyHome, name: str, file: Path, *mode: str
) -> Result:
    port = int(str(home.service(NAME)["endpoint"]).rsplit(":", 1)[1])
    before = {r["id"] for r in live(home)}
    tokens = round(args.duration / args.interval)
    streams = [Stream(port, tokens, args.interval) for _ in range(args.streams)]
    for s in streams:
        s.start()
    for s in streams:
        s.first.wait(30)
    t_cmd = time.time()
    home.run("update", NAME, str(file), *mode, "--wait", "--timeout", "900")
    t_ret = time.time()
    leaving = before - {r["id"] for r in live(home) if r["status"] == "READY"}
    deadline = time.monotonic() + args.duration * 3 + 60
    while time.monotonic() < deadline and leaving & {r["id"] for r in live(home)}:
        time.sleep(0.2)
    t_gone = time.time()
    for s in streams:
        s.join(args.duration * 2 + 60)
    return Result(
        name,
        t_ret - t_cmd,
        t_gone - t_ret,
        [s.received for s in streams],
        tokens,
        max(s.ended_at for s in streams) - t_cmd,
        [[t - t_cmd for t in s.arrivals] for s in streams],
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=60.0, help="each stream's length, seconds")
    p.add_argument("--interval", type=float, default=0.02, help="seconds between tokens")
    p.add_argument("--streams", type=int, default=4, help="streams in flight per scenario")
    args = p.parse_args()
    print(machine_line())
    print(f"steadyserve from {Path(steadyserve.__file__).parent}")
    results = []
    with steady_home("steady-bench-streams-") as home:
        app = home.tmp / "app"
        app.mkdir()
        shutil.copy(ROOT / "examples" / "http_server" / "server.py", app / "server.py")
        home.run("up", str(home.write("v1.yaml", service_yaml(spec(app, "1", 2)))), "--wait")
        v2 = home.write("v2.yaml", service_yaml(spec(app, "2", 2)))
        results.append(scenario(args, home, "rolling", v2))
        v3 = home.write("v3.yaml", service_yaml(spec(app, "3", 2)))
        results.append(scenario(args, home, "blue_green", v3, "--mode", "blue_green"))
        v4 = home.write("v4.yaml", service_yaml(spec(app, "3", 1)))
        results.append(scenario(args, home, "scale_down", v4))
    rows = [
        [
            r.name,
            fmt(r.update_s, 1),
            fmt(r.linger_s, 1),
            fmt(r.stream_end_s, 1),
            " / ".join(str(n) for n in r.received),
            str(r.sent),
            str(sum(1 for n in r.received if n < r.sent)),
        ]
        for r in results
    ]
    print(
        f"\n{args.streams} streams of {args.duration:g} s ({round(args.duration / args.interval)}"
        " tokens) in flight during each change:\n"
    )
    print(
        table(
            [
                "change",
                "update s",
                "old replicas linger s",
                "last stream ends s",
                "chunks received",
                "sent",
                "cut",
            ],
            rows,
        )
    )
    plot(results)
    return 0


def plot(results: list[Result]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.2), sharey=True)
    for ax, r in zip(axes, results, strict=True):
        for arrivals in r.arrivals:
            ax.plot(arrivals, range(1, len(arrivals) + 1), linewidth=1)
        ax.axvline(r.update_s, color="green", linestyle="--", label="update SUCCEEDED")
        ax.axvline(r.update_s + r.linger_s, color="red", linestyle=":", label="old replica gone")
        ax.set_title(r.name)
        ax.set_xlabel("seconds since the update command")
    axes[0].set_ylabel("chunks received per stream")
    axes[0].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    path = plot_path("long_streams.png")
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
