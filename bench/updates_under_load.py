"""Updates under a constant-rate load: does any request fail, and how long does it take?

Brings up examples/http_server (2 replicas, user_config delivered by POST to
``/-/reconfigure``) with the real ``steady up`` in a temporary STEADY_HOME,
starts an open-loop load (bench/loadgen.py, ``--rate`` req/s through the load
balancer) and, after ``--warmup`` seconds and then ``--duration`` seconds apart,
runs the real ``steady update``:
  1. rolling     (an env change: new replicas, --mode rolling)
  2. blue_green  (another env change, --mode blue_green)
  3. in_place    (a user_config change: delivered to the running replicas)
For each: failed requests and p50/p99 latency before / during / after, the time
from the command to fully updated (``update.finished_at`` of ``steady status
--json``, polled until the update is no longer IN_PROGRESS) and, in place, how
long after the command returned every replica answered with the new config
(each replica polled directly, and the last old answer through the LB).

When ``ray[serve]`` is installed, the same load runs against Ray Serve (inside a
loopback-only network namespace) during a code update and a user_config update
(``serve.run`` of the changed application).

    python bench/updates_under_load.py --duration 10 --rate 200

Prints the table and writes bench/out/updates_timeline.png (which version and
config answered each request, over time).
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import (
    HERE,
    ROOT,
    SteadyHome,
    fmt,
    machine_line,
    percentile,
    plot_path,
    pyplot,
    ray_problem,
    run_in_netns,
    service_yaml,
    steady_home,
    stop_process,
    table,
)
from loadgen import Record, load

NAME = "upd"


@dataclass
class Scenario:
    system: str
    name: str
    t_cmd: float
    t_ret: float
    t_done: float
    new_label: str
    outcome: str = "SUCCEEDED"
    # in place: seconds after the command returned when every replica answered the new config
    direct_lag_s: float | None = None
    records: list[Record] = field(default_factory=list)


def spec(app: Path, rev: str, message: str) -> dict[str, Any]:
    return {
        "name": NAME,
        "service": {
            "readiness_probe": {"path": "/health", "initial_delay_seconds": 30},
            "replicas": 2,
            "health_check_period_s": 1,
            "graceful_shutdown_wait_loop_s": 0.5,
            "graceful_shutdown_timeout_s": 5,
            "reconfigure_path": "/-/reconfigure",
            "user_config": {"message": message},
        },
        "workdir": str(app),
        "envs": {"BENCH_REV": rev},
        "run": f"{sys.executable} server.py",
    }


class ConfigPoller(threading.Thread):
    """Polls each replica directly until it answers ``message``; notes when it first did."""

    def __init__(self, ports: list[int], message: str, timeout: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.ports, self.message, self.timeout = ports, message, timeout
        self.first_new: dict[int, float] = {}

    def run(self) -> None:
        conns = {p: http.client.HTTPConnection("127.0.0.1", p, timeout=5) for p in self.ports}
        deadline = time.monotonic() + self.timeout
        while len(self.first_new) < len(self.ports) and time.monotonic() < deadline:
            for port, conn in conns.items():
                if port in self.first_new:
                    continue
                sent = time.time()
                try:
                    conn.request("GET", "/")
                    body = json.loads(conn.getresponse().read())
                except (OSError, http.client.HTTPException, ValueError):
                    conn.close()
                    continue
                if body.get("message") == self.message:
                    self.first_new[port] = sent
            time.sleep(0.001)
        for conn in conns.values():
            conn.close()


def wait_update(home: SteadyHome, version: int, timeout: float = 300) -> dict[str, Any]:
    """Poll ``steady status --json`` until the update to ``version`` is no longer running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        update = home.service(NAME).get("update") or {}
        if update.get("to_version") == version and update.get("status") != "IN_PROGRESS":
            return update
        time.sleep(0.1)
    raise RuntimeError(f"update to version {version} not done after {timeout}s")


def run_steady(args: argparse.Namespace, home: SteadyHome) -> list[Scenario]:
    app = home.tmp / "app"
    app.mkdir()
    shutil.copy(ROOT / "examples" / "http_server" / "server.py", app / "server.py")
    first = home.write("v1.yaml", service_yaml(spec(app, "1", "cfg-1")))
    home.run("up", str(first), "--wait")
    port = int(str(home.service(NAME)["endpoint"]).rsplit(":", 1)[1])
    records_file = home.tmp / "records.json"
    loadgen = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "loadgen.py"),
            "--url",
            f"http://127.0.0.1:{port}/",
            "--rate",
            str(args.rate),
            "--max-seconds",
            str(args.duration * 6 + 900),
            "--out",
            str(records_file),
        ],
        stdout=subprocess.DEVNULL,
    )
    steps = [
        ("rolling", ["--mode", "rolling"], spec(app, "2", "cfg-1")),
        ("blue_green", ["--mode", "blue_green"], spec(app, "3", "cfg-1")),
        ("in_place", [], spec(app, "3", "cfg-2")),
    ]
    scenarios = []
    try:
        time.sleep(args.warmup + args.duration)
        for i, (name, flags, new) in enumerate(steps, start=2):
            path = home.write(f"v{i}.yaml", service_yaml(new))
            message = new["service"]["user_config"]["message"]
            poller = None
            if name == "in_place":
                ports = [int(r["port"]) for r in home.service(NAME)["replicas"]]
                poller = ConfigPoller(ports, message)
            t_cmd = time.time()
            if poller:
                poller.start()
            home.run("update", NAME, str(path), *flags)
            t_ret = time.time()
            update = wait_update(home, i)
            label = f"v{new['envs']['BENCH_REV']} {message}"
            scenario = Scenario(
                "SteadyServe",
                name,
                t_cmd,
                t_ret,
                float(update["finished_at"]),
                label,
                update["status"],
            )
            if poller:
                poller.join()
                if len(poller.first_new) == len(poller.ports):
                    scenario.direct_lag_s = max(poller.first_new.values()) - t_ret
            scenarios.append(scenario)
            time.sleep(args.duration)
    finally:
        stop_process(loadgen, timeout=30)
    records = load(records_file) if records_file.exists() else []
    for s in scenarios:
        s.records = records
    return scenarios


def run_ray(args: argparse.Namespace) -> tuple[list[Scenario], str]:
    problem = ray_problem()
    if problem:
        return [], f"Ray Serve skipped: {problem}"
    with tempfile.TemporaryDirectory(prefix="steady-bench-ray-") as tmp:
        out, log = Path(tmp) / "ray.json", Path(tmp) / "ray.log"
        argv = [
            sys.executable,
            str(HERE / "ray_side.py"),
            "updates",
            "--duration",
            str(args.duration),
            "--rate",
            str(args.rate),
            "--warmup",
            str(args.warmup),
            "--replicas",
            "2",
            "--out",
            str(out),
        ]
        proc = run_in_netns(argv, timeout=900 + args.duration * 6, log=log)
        if proc.returncode != 0 or not out.exists():
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            return [], f"Ray Serve failed (exit {proc.returncode}):\n{tail}"
        data = json.loads(out.read_text())
    records = [Record(**r) for r in data["records"]]
    scenarios = [
        Scenario(
            "Ray Serve",
            s["name"],
            s["t_cmd"],
            s["t_ret"],
            s["t_done"],
            s["new_label"],
            records=records,
        )
        for s in data["scenarios"]
    ]
    return scenarios, f"Ray Serve {data['ray_version']} (2 replicas, in a loopback netns)"


# analysis --------------------------------------------------------------------
def window(records: list[Record], start: float, end: float) -> list[Record]:
    return [r for r in records if start <= r.sent < end]


def lat(records: list[Record]) -> str:
    ok = [r.latency_ms for r in records if r.ok]
    return f"{fmt(percentile(ok, 50))}/{fmt(percentile(ok, 99))}"


def last_old_answer(s: Scenario) -> float | None:
    """Seconds after the command returned of the last request answered by the old config."""
    old = [
        r.sent
        for r in s.records
        if r.ok and r.sent >= s.t_cmd - 5 and r.sent <= s.t_done + 30 and r.label != s.new_label
    ]
    return max(old) - s.t_ret if old else None


def report(scenarios: list[Scenario], args: argparse.Namespace, notes: list[str]) -> None:
    rows = []
    for s in scenarios:
        d = args.duration
        before = window(s.records, s.t_cmd - d, s.t_cmd)
        during = window(s.records, s.t_cmd, s.t_done)
        after = window(s.records, s.t_done, s.t_done + d)
        failed = sum(1 for r in before + during + after if not r.ok)
        in_place = s.name in ("in_place", "ray user_config")
        lag = last_old_answer(s) if in_place else None
        rows.append(
            [
                s.system,
                s.name,
                s.outcome,
                f"{s.t_ret - s.t_cmd:.2f}",
                f"{s.t_done - s.t_cmd:.2f}",
                str(len(before) + len(during) + len(after)),
                str(failed),
                lat(before),
                lat(during),
                lat(after),
                fmt(s.direct_lag_s * 1000, 0) if s.direct_lag_s is not None else "-",
                fmt(lag * 1000, 0) if lag is not None else "-",
            ]
        )
    print(
        f"open-loop load {args.rate:g} req/s (latency from the scheduled send time), "
        f"{args.duration:g}s before and after each update (after {args.warmup:g}s of warm-up); "
        f"{machine_line()}"
    )
    print(
        table(
            [
                "system",
                "update",
                "outcome",
                "cmd s",
                "to updated s",
                "requests",
                "failed",
                "p50/p99 ms before",
                "during",
                "after",
                "new cfg on all +ms (direct)",
                "last old answer +ms (LB)",
            ],
            rows,
        )
    )
    print(
        "'cmd s': until the command returned; 'to updated s': until update.finished_at "
        "(Ray: serve.run returned); '+ms': after the command returned (negative: before)."
    )
    for note in notes:
        print(note)
    failed_all = sum(int(r[6]) for r in rows)
    print(
        f"target: 0 failed requests in every update: {failed_all} failed "
        f"({'holds' if failed_all == 0 else 'MISSED'})"
    )
    for s in scenarios:
        if s.name == "in_place" and s.direct_lag_s is not None:
            ok = s.direct_lag_s <= 0.1
            print(
                f"target: in-place user_config on every replica within 100 ms of the command "
                f"returning: {s.direct_lag_s * 1000:+.0f} ms ({'holds' if ok else 'MISSED'})"
            )


def plot(scenarios: list[Scenario]) -> None:
    plt = pyplot()
    if plt is None or not scenarios:
        return
    fig, axes = plt.subplots(
        len(scenarios), 1, figsize=(11, 2.3 * len(scenarios) + 0.6), squeeze=False
    )
    for ax, s in zip(axes[:, 0], scenarios, strict=True):
        near = [r for r in s.records if s.t_cmd - 3 <= r.sent <= s.t_done + 3]
        labels = sorted({r.label for r in near if r.ok})
        levels = {label: i for i, label in enumerate(labels)}
        levels["failed"] = -1
        for label, level in levels.items():
            pts = [r.sent - s.t_cmd for r in near if r.label == label]
            color = "red" if label == "failed" else None
            ax.scatter(pts, [level] * len(pts), s=4, color=color, label=label)
        ax.set_yticks(list(levels.values()))
        ax.set_yticklabels(list(levels))
        ax.set_ylim(-1.5, len(labels) - 0.5)
        ax.set_xlim(-1.0, s.t_done - s.t_cmd + 2.0)
        for x, style, text in (
            (0, "k-", "command"),
            (s.t_ret - s.t_cmd, "b--", "returned"),
            (s.t_done - s.t_cmd, "g:", "updated"),
        ):
            ax.axvline(x, color=style[0], linestyle=style[1:], linewidth=1, label=text)
        ax.set_title(f"{s.system}: {s.name}", fontsize=9)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[-1, 0].set_xlabel("seconds since the update command (request send time)")
    fig.suptitle("Which version / config answered each request")
    fig.tight_layout()
    path = plot_path("updates_timeline.png")
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--duration",
        type=float,
        default=10.0,
        help="seconds of load before the first update and after each one",
    )
    p.add_argument("--rate", type=float, default=200.0, help="requests per second")
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds of load before the first 'before' window (default: min(5, duration))",
    )
    p.add_argument("--no-ray", dest="ray", action="store_false", help="skip Ray Serve")
    args = p.parse_args()
    if args.warmup is None:
        args.warmup = min(5.0, args.duration)
    with steady_home("steady-bench-upd-") as home:
        scenarios = run_steady(args, home)
    notes = ["SteadyServe: examples/http_server, 2 replicas, stdlib ThreadingHTTPServer"]
    if args.ray:
        ray_scenarios, note = run_ray(args)
        scenarios += ray_scenarios
        notes.append(note)
    else:
        notes.append("Ray Serve skipped: --no-ray")
    report(scenarios, args, notes)
    plot(scenarios)
    failed = any(s.outcome != "SUCCEEDED" for s in scenarios)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
