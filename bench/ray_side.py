"""The Ray Serve side of the benchmarks, run inside a loopback-only network namespace.

Ray binds the machine's own network address unless that address is loopback,
so the benchmarks start this script through ``benchlib.run_in_netns`` (a fresh
network and pid namespace: ``lo`` only, and every Ray process dies with it).
It writes its measurements as JSON to ``--out``; the calling benchmark prints
and plots them next to SteadyServe's.

    python bench/ray_side.py lb --duration 5 --connections 1,16,64 --replicas 1,2 --out r.json
    python bench/ray_side.py updates --duration 10 --rate 200 --out r.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, cast

from benchlib import HERE, run_wrk, stop_process, wait_port

PORT = 8000
URL = f"http://127.0.0.1:{PORT}/"
# The same drain settings as the SteadyServe service files of the benchmarks.
GRACEFUL = {"graceful_shutdown_wait_loop_s": 0.5, "graceful_shutdown_timeout_s": 5}


def start_ray(tmp: Path) -> Any:
    import ray
    from ray import serve

    if os.environ.get("RAY_ADDRESS"):
        raise SystemExit("refusing to attach to an existing Ray cluster (RAY_ADDRESS is set)")
    ray.init(
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp),
        configure_logging=False,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": PORT})
    return serve


def hello_app(serve: Any, replicas: int) -> Any:
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse

    @serve.deployment(
        num_replicas=replicas,
        max_ongoing_requests=100,  # SteadyServe's default, instead of Ray's 5
        ray_actor_options={"num_cpus": 0},
    )
    class Hello:
        async def __call__(self, request: Request) -> PlainTextResponse:
            return PlainTextResponse("hello")

    return cast(Any, Hello).bind()


def versioned_app(serve: Any, version: str, message: str, replicas: int) -> Any:
    from starlette.requests import Request

    @serve.deployment(
        name="Versioned",
        num_replicas=replicas,
        max_ongoing_requests=100,
        ray_actor_options={"num_cpus": 0},
        user_config={"message": message},
        health_check_period_s=1,
        **GRACEFUL,
    )
    class Versioned:
        def __init__(self, version: str) -> None:
            self.version = version
            self.message = ""
            self.replica = serve.get_replica_context().replica_id.unique_id

        def reconfigure(self, config: dict[str, str]) -> None:
            self.message = config["message"]

        async def __call__(self, request: Request) -> dict[str, str]:
            return {"version": self.version, "message": self.message, "replica_id": self.replica}

    return cast(Any, Versioned).bind(version)


def get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def bench_lb(args: argparse.Namespace, serve: Any) -> dict[str, Any]:
    rows = []
    for replicas in (int(x) for x in args.replicas.split(",")):
        serve.run(hello_app(serve, replicas), name="hello", route_prefix="/")
        wait_port(PORT, 60)
        if not get_ok(URL):
            raise SystemExit("Ray Serve does not answer on " + URL)
        for c in (int(x) for x in args.connections.split(",")):
            run_wrk(URL, c, 1, args.threads)  # warm up
            result = run_wrk(URL, c, args.duration, args.threads)
            rows.append({"replicas": replicas, "connections": c, **result.__dict__})
            print(f"ray: {replicas} replica(s) c={c}: {result.rps:.0f} req/s", flush=True)
        serve.delete("hello")
    return {"rows": rows}


def bench_updates(args: argparse.Namespace, serve: Any, tmp: Path) -> dict[str, Any]:
    records = tmp / "ray-records.json"
    started = time.time()
    serve.run(versioned_app(serve, "1", "cfg-1", args.replicas), name="app", route_prefix="/")
    up_s = time.time() - started
    wait_port(PORT, 60)
    loadgen = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "loadgen.py"),
            "--url",
            URL,
            "--rate",
            str(args.rate),
            "--max-seconds",
            str(args.duration * 6 + 600),
            "--out",
            str(records),
        ],
    )
    scenarios = []
    try:
        time.sleep(args.warmup + args.duration)
        steps = [("ray code update", "2", "cfg-1"), ("ray user_config", "2", "cfg-2")]
        for name, version, message in steps:
            t_cmd = time.time()
            serve.run(
                versioned_app(serve, version, message, args.replicas), name="app", route_prefix="/"
            )
            t_ret = time.time()  # serve.run returns once the application is RUNNING again
            scenarios.append(
                {
                    "name": name,
                    "t_cmd": t_cmd,
                    "t_ret": t_ret,
                    "t_done": t_ret,
                    "new_label": f"v{version} {message}",
                }
            )
            print(f"ray: {name} took {t_ret - t_cmd:.2f}s", flush=True)
            time.sleep(args.duration)
    finally:
        stop_process(loadgen, timeout=30)
    return {
        "up_s": up_s,
        "scenarios": scenarios,
        "records": json.loads(records.read_text()) if records.exists() else [],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=("lb", "updates"))
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--connections", default="1,16,64")
    p.add_argument("--replicas", default="1,2", help="lb: comma list; updates: one number")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--warmup", type=float, default=5.0, help="updates: load before measuring")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    import ray

    with tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp") as tmp:
        serve = start_ray(Path(tmp))
        try:
            if args.what == "lb":
                result = bench_lb(args, serve)
            else:
                args.replicas = int(args.replicas.split(",")[0])
                result = bench_updates(args, serve, Path(tmp))
            result["ray_version"] = ray.__version__
            args.out.write_text(json.dumps(result))
        finally:
            # No serve.shutdown(): it drains for seconds, and every Ray process dies with
            # this namespace anyway when this script (its first process) exits.
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
