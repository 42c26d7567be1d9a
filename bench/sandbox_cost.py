"""What the sandbox of isolated replicas costs (backends/sandbox.py, docs/isolation.md).

Two questions, each answered before vs after in one run, the two kinds alternating
round by round so the machine's load falls on both alike:

1. **Replica start**: from the local backend's ``launch()`` of an isolated
   ``bench/hello_replica.py`` (fixed port 8080, its own network namespace) to the
   first TCP connection it accepts inside that namespace, then ``stop()`` (SIGTERM
   until gone). "host network" is a replica without isolation (on a free port of
   the host's loopback: the default for ``$PORT`` services); "network only" is the
   namespace without the sandbox (``STEADY_SANDBOX=0``); "sandbox" adds
   bubblewrap, the init and the seccomp filter.
2. **Requests per second through the load balancer**: wrk (``-t1``) against three
   homes' endpoints, one hello replica each, of the three kinds.

Needs root (network namespaces), slirp4netns, bubblewrap and wrk.

    python bench/sandbox_cost.py --starts 20 --duration 3 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import (
    HERE,
    SteadyHome,
    fmt,
    free_port,
    have_wrk,
    plot_path,
    pyplot,
    run_wrk,
    table,
)

from steadyserve.backends import netns, sandbox
from steadyserve.backends.base import LaunchRequest
from steadyserve.backends.local import LocalBackend
from steadyserve.home.paths import Home
from steadyserve.wire import replica_contract as contract
from steadyserve.wire.netns import connect_in

KINDS = {"host network": "", "network only": "0", "sandbox": "1"}
"""Each kind's STEADY_SANDBOX; "host network" is no isolation at all (its value unused)."""
PORT = 8080
READY_TIMEOUT_S = 30.0


def switch(on: str) -> None:
    os.environ[sandbox.SWITCH] = on
    sandbox.unavailable.cache_clear()


async def start_and_stop(
    backend: LocalBackend, replica_id: int, isolate: bool
) -> tuple[float, float]:
    """Seconds from launch to the first accepted connection, and from stop to gone."""
    home = backend.home
    port = PORT if isolate else free_port()
    workdir = home.version_workdir("bench", 1)
    tag = f"{contract.home_id(home.root)}/bench/{replica_id}"
    request = LaunchRequest(
        service="bench",
        version=1,
        replica_id=replica_id,
        command=[sys.executable, "hello_replica.py", "--port", str(port)],
        env={**contract.base_env(os.environ), contract.REPLICA_TAG: tag},
        workdir=workdir,
        log_path=home.replica_log("bench", replica_id),
        fixed_port=port,
        isolate=isolate,
    )
    started = time.perf_counter()
    handle = await backend.launch(request)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            if handle.netns is not None:
                sock = await connect_in(netns.path_of(handle.netns), "127.0.0.1", port)
                sock.close()
            else:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
            break
        except OSError:
            if time.monotonic() > deadline or handle.exit_code() is not None:
                why = f"replica {replica_id} did not start: see {request.log_path}"
                raise RuntimeError(why) from None
            await asyncio.sleep(0.002)
    ready = time.perf_counter() - started
    stopping = time.perf_counter()
    await backend.stop(handle, 10.0)
    return ready, time.perf_counter() - stopping


async def measure_starts(count: int) -> dict[str, tuple[list[float], list[float]]]:
    with tempfile.TemporaryDirectory(prefix="steady-bench-") as tmp:
        home = Home(Path(tmp) / "home").ensure()
        workdir = home.version_workdir("bench", 1)
        workdir.mkdir(parents=True)
        shutil.copy(HERE / "hello_replica.py", workdir / "hello_replica.py")
        backend = LocalBackend(home)
        found: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in KINDS}
        replica_id = 0
        for _ in range(count):
            for kind, on in KINDS.items():
                switch(on)
                replica_id += 1
                ready, gone = await start_and_stop(backend, replica_id, isolate=bool(on))
                found[kind][0].append(ready)
                found[kind][1].append(gone)
        return found


def measure_lb(
    duration: float, rounds: int, connections: list[int]
) -> dict[tuple[str, int], list[float]]:
    homes = {kind: SteadyHome(extra_env={sandbox.SWITCH: on}) for kind, on in KINDS.items()}
    try:
        urls = {}
        for kind, home in homes.items():
            app = home.tmp / "app"
            app.mkdir()
            shutil.copy(HERE / "hello_replica.py", app / "hello_replica.py")
            isolation = "network" if KINDS[kind] else "none"
            spec = home.write(
                "hello.yaml",
                "name: hello\nservice:\n  readiness_probe: /\n  replicas: 1\n"
                f"  isolation: {isolation}\n  health_check_period_s: 10\n"
                f"workdir: {app}\nrun: {sys.executable} hello_replica.py --port $PORT\n",
            )
            home.run("up", str(spec), "--wait")
            endpoint = str(home.service("hello")["endpoint"])
            urls[kind] = f"http://127.0.0.1:{endpoint.rsplit(':', 1)[1]}/"
        rps: dict[tuple[str, int], list[float]] = {}
        for c in connections:
            for url in urls.values():
                run_wrk(url, c, 1)  # warm up: the pooled upstream connections
            for _ in range(rounds):
                for kind, url in urls.items():
                    rps.setdefault((kind, c), []).append(run_wrk(url, c, duration).rps)
        return rps
    finally:
        for home in homes.values():
            home.close()


def plot(starts: dict[str, tuple[list[float], list[float]]]) -> None:
    """Each kind's start times, sorted: ``out/sandbox_cost.png``."""
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for kind, (ready, _) in starts.items():
        ax.plot(sorted(r * 1000 for r in ready), label=kind, marker=".")
    ax.set_xlabel("start, sorted")
    ax.set_ylabel("launch to first accepted connection (ms)")
    ax.set_title("replica start: host network, network namespace, sandbox")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot_path("sandbox_cost.png"))
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=20, help="replica starts per kind")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", default="1,16")
    parser.add_argument(
        "--no-lb", dest="lb", action="store_false", help="measure starts only (no homes, no wrk)"
    )
    args = parser.parse_args()
    for why in (netns.unavailable(), sandbox.unavailable()):
        if why is not None:
            sys.exit(f"cannot measure here: {why}")
    starts = asyncio.run(measure_starts(args.starts))
    rows = []
    for kind, (ready, gone) in starts.items():
        ms = sorted(r * 1000 for r in ready)
        rows.append(
            [
                kind,
                str(len(ms)),
                fmt(statistics.median(ms), 1),
                fmt(ms[int(len(ms) * 0.9) - 1 if len(ms) >= 10 else -1], 1),
                fmt(statistics.median(g * 1000 for g in gone), 1),
            ]
        )
    print("replica start: launch() to the first accepted connection; stop(): SIGTERM to gone")
    print(table(["kind", "starts", "start p50 ms", "start p90 ms", "stop p50 ms"], rows))
    plot(starts)
    if not args.lb:
        return
    if not have_wrk():
        print("wrk is not installed: no LB rows (bench/setup.sh)")
        return
    conns = [int(c) for c in args.connections.split(",")]
    rps = measure_lb(args.duration, args.rounds, conns)
    each = f"{args.duration:g}s per run, median of {args.rounds}"
    print(f"\nthrough the load balancer: wrk -t1, {each}")
    lb_rows = []
    for c in conns:
        base = statistics.median(rps[("host network", c)])
        for kind in KINDS:
            value = statistics.median(rps[(kind, c)])
            lb_rows.append([kind, str(c), fmt(value, 0), f"{value / base:.2f}"])
    print(table(["kind", "conns", "req/s", "of host network"], lb_rows))


if __name__ == "__main__":
    main()
