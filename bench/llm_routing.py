"""Routing that knows it serves language models: the time to first token it buys.

Four simulated prefix-caching engines (bench/llm_engine.py: 32k-token KV cache
each, LRU; prefill 0.2 ms per uncached token; decode 20 ms per token; 8
concurrent sequences; 16 tokens streamed as SSE) behind SteadyServe's real load
balancer process, whose route table this script serves (as the controller
would), one row per policy:

    round_robin, least_load, power_of_two, prefix_affinity,
    session_affinity (affinity_key json:/user), and an oracle that asks every
    engine what it has cached and sends the request straight to the best one.

Workloads (fixed, seeded):

- chat: 24 multi-turn sessions of 8 turns, each from its own ~2k-token system
  prompt, a ~250-token question a turn (~100k distinct tokens in all: more than
  one replica's cache, less than four), interleaved; a turn is sent after the
  previous turn of its session answered;
- shared: 128 requests over 6 long (~6k-token) system prompts, each with its
  own ~100-token question;
- uniform: 384 requests with unrelated ~2k-token prompts (three times the others:
  a p99 of 128 samples is one request, too noisy to compare two policies by).

Requests arrive at a fixed rate per workload: the rate that keeps the fleet 70%
busy if every prefill were cold (what least_load gets on the chat workload).
One more row runs prefix_affinity on the chat workload while the table goes
through the changes of a rolling update (each of the 4 replicas replaced by a
cold one, one at a time: add the new one, then remove the old). Engines sleep
real time scaled by --scale; every time printed is model time (measured time
divided by the scale). Caches are emptied and the load balancer restarted
between rows.

    python bench/llm_routing.py                 # all workloads and rows, ~5 min
    python bench/llm_routing.py --smoke         # a few seconds: CI's smoke test
    python bench/llm_routing.py --engine llama --llama-server PATH   # real engines

``--engine llama`` runs real llama.cpp servers instead, with smaller workloads
and no time scale (bench/llm_llama.py says what is scaled and why).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from benchlib import HERE, fmt, machine_line, percentile, plot_path, pyplot, stop_process, table
from llm_workloads import (
    Req,
    chat_workload,
    distinct_tokens,
    prompt_tokens,
    rate_for,
    shared_workload,
    uniform_workload,
)

from steadyserve.core.routing.options import PolicyOptions
from steadyserve.wire.routes import ReplicaRoute, RouteTable

REPLICAS = 4
ROWS = ["round_robin", "least_load", "power_of_two", "prefix_affinity", "session_affinity"]
ORACLE = "oracle"
UPDATE_ROW = "prefix_affinity + rolling update"
IMBALANCE = 4  # the oracle's overload rule, the same as prefix_affinity's default


# the route table, as the controller would serve it -----------------------------
class RouteServer:
    """The controller's LB endpoints (routes long-poll, reports) in a thread."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.version = 0
        self.table: dict[str, Any] = {}
        self.acked: set[str] = set()
        self.loop = asyncio.new_event_loop()
        self.changed: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        self.changed = asyncio.Event()
        app = web.Application()
        app.router.add_get("/api/v1/lb/{service}/routes", self._routes)
        app.router.add_post("/api/v1/lb/{service}/report", self._ok)
        app.router.add_post("/api/v1/lb/{service}/wake", self._ok)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        controller = {"pid": os.getpid(), "url": f"http://127.0.0.1:{port}"}
        (self.home / "controller.json").write_text(json.dumps(controller))

    async def _ok(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"target_replicas": REPLICAS})

    async def _routes(self, request: web.Request) -> web.Response:
        known = request.query.get("known", "")
        self.acked.add(known)
        key = f"e:{self.version}"
        if known == key and self.changed is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), float(request.query.get("wait", 25)))
        return web.json_response(self.table)

    def set(self, policy: str, replicas: list[tuple[int, int]]) -> None:
        """Publish a table and wait until the load balancer acknowledged it."""
        options = PolicyOptions(affinity_key="json:/user")

        def apply() -> None:
            self.version += 1
            routes = tuple(ReplicaRoute(rid, 1, "127.0.0.1", port) for rid, port in replicas)
            self.table = RouteTable("e", self.version, policy, 100, -1, routes, options=options)
            self.table = self.table.to_json()
            assert self.changed is not None
            self.changed.set()
            self.changed = asyncio.Event()

        key = f"e:{self.version + 1}"  # read before apply runs in the server's thread
        self.loop.call_soon_threadsafe(apply)
        deadline = time.monotonic() + 10
        while key not in self.acked:
            if time.monotonic() > deadline:
                raise RuntimeError("the load balancer did not take the table")
            time.sleep(0.02)

    def close(self) -> None:
        async def stop() -> None:
            if self.changed is not None:
                self.changed.set()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def start_lb(home: Path) -> tuple[subprocess.Popen[bytes], int]:
    log = open(home / "lb.log", "ab")  # noqa: SIM115 - the process holds it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "steadyserve.lb",
            *("--service", "llm", "--port", "0"),
            "--home",
            str(home),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        env={**os.environ, "STEADY_HOME": str(home)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        stop_process(proc)
        raise RuntimeError(f"load balancer did not start: {line!r}")
    return proc, int(line.split("http://127.0.0.1:")[1].split()[0])


# one run ---------------------------------------------------------------------
@dataclass
class Result:
    sent: float  # model seconds since the run began
    ttft: float | None  # model seconds; None: failed
    tokens: int = 0
    prompt: int = 0
    cached: int = 0
    done: float = 0.0
    error: str = ""


@dataclass
class Run:
    row: str
    workload: str
    results: list[Result] = field(default_factory=list)
    wall: float = 0.0  # model seconds from the first send to the last answer
    changes: list[float] = field(default_factory=list)  # a rolling update's steps (model s)

    @property
    def ok(self) -> list[Result]:
        return [r for r in self.results if r.ttft is not None]

    def figures(self) -> list[str]:
        ttfts = [r.ttft * 1000 for r in self.ok if r.ttft is not None]
        prompt = sum(r.prompt for r in self.ok)
        hit = sum(r.cached for r in self.ok) / prompt if prompt else 0.0
        tokens = sum(r.tokens for r in self.ok)
        failed = len(self.results) - len(self.ok)
        return [
            self.row,
            fmt(percentile(ttfts, 50), 0),
            fmt(percentile(ttfts, 99), 0),
            fmt(tokens / self.wall if self.wall else 0.0, 1),
            f"{hit:.0%}",
            str(failed),
        ]


async def stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], started: float, scale: float
) -> Result:
    t0 = time.monotonic()
    result = Result(sent=(t0 - started) / scale, ttft=None)
    first: float | None = None
    done = False
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                result.error = f"HTTP {resp.status}: {(await resp.read())[:200]!r}"
                return result
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                if first is None:
                    first = time.monotonic()
                data = line[6:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                result.tokens += 1
                usage = chunk.get("usage")
                if usage:
                    result.prompt = usage["prompt_tokens"]
                    result.cached = usage["cached_tokens"]
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        result.error = repr(exc)
        return result
    if not done:
        result.error = "the stream ended before [DONE]"
    if done and first is not None:
        result.ttft = (first - t0) / scale
        result.done = (time.monotonic() - started) / scale
    return result


async def oracle_url(session: aiohttp.ClientSession, ports: list[int], body: dict[str, Any]) -> str:
    """The engine with the longest cached prefix, unless it is IMBALANCE busier."""

    async def probe(port: int) -> tuple[int, int, int]:
        async with session.post(f"http://127.0.0.1:{port}/-/probe", json=body) as resp:
            got = await resp.json()
        return got["cached"], got["active"], port

    views = await asyncio.gather(*(probe(p) for p in ports))
    least = min(views, key=lambda v: v[1])
    best = max(views, key=lambda v: (v[0], -v[1]))
    chosen = least if best[0] == 0 or best[1] - least[1] > IMBALANCE else best
    return f"http://127.0.0.1:{chosen[2]}/v1/chat/completions"


async def drive(
    reqs: list[Req],
    rate: float,
    scale: float,
    lb_port: int | None,
    engine_ports: list[int],
    on_progress: Any = None,
) -> tuple[list[Result], float]:
    """Send ``reqs`` on their schedule; None lb_port is the oracle."""
    started = time.monotonic()
    done: dict[int, asyncio.Event] = {r.index: asyncio.Event() for r in reqs}
    results: list[Result | None] = [None] * len(reqs)
    timeout = aiohttp.ClientTimeout(total=600 * scale + 60)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def one(req: Req) -> None:
            await asyncio.sleep(max(0.0, started + req.index / rate * scale - time.monotonic()))
            if req.after is not None:
                await done[req.after].wait()
            if on_progress is not None:
                await on_progress(req.index / len(reqs))
            try:
                if lb_port is None:
                    probe_started = time.monotonic()
                    url = await oracle_url(session, engine_ports, req.body)
                    # The oracle's probes are not routing a real router would pay.
                    shift = time.monotonic() - probe_started
                    results[req.index] = await stream(
                        session, url, req.body, started + shift, scale
                    )
                else:
                    url = f"http://127.0.0.1:{lb_port}/v1/chat/completions"
                    results[req.index] = await stream(session, url, req.body, started, scale)
            finally:
                done[req.index].set()

        await asyncio.gather(*(one(r) for r in reqs))
    final = [r if r is not None else Result(0.0, None) for r in results]
    wall = max((r.done for r in final if r.ttft is not None), default=0.0)
    first = min((r.sent for r in final), default=0.0)
    return final, wall - first


def engines(count: int, scale: float, home: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "llm_engine.py"),
            "--replicas",
            str(count),
            "--scale",
            str(scale),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "STEADY_HOME": home},  # so a leftover engine is found by its home
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("{"):
        stop_process(proc)
        raise RuntimeError(f"engines did not start: {line!r}")
    ports: list[int] = json.loads(line)["ports"]
    return proc, ports


async def reset(ports: list[int]) -> None:
    async with aiohttp.ClientSession() as session:
        for port in ports:
            async with session.post(f"http://127.0.0.1:{port}/-/reset") as resp:
                await resp.read()


def run_row(
    row: str,
    workload: str,
    reqs: list[Req],
    rate: float,
    args: argparse.Namespace,
    home: Path,
    routes: RouteServer,
    ports: list[int],
) -> Run:
    active, spare = ports[:REPLICAS], ports[REPLICAS:]
    asyncio.run(reset(ports))
    run = Run(row, workload)
    if row == ORACLE:
        run.results, run.wall = asyncio.run(drive(reqs, rate, args.scale, None, active))
        return run
    policy = "prefix_affinity" if row == UPDATE_ROW else row
    lb, lb_port = start_lb(home)
    try:
        routes.set(policy, [(i + 1, p) for i, p in enumerate(active)])
        progress = None
        if row == UPDATE_ROW:
            table = [(i + 1, p) for i, p in enumerate(active)]
            step = {"next": 0}

            async def progress_hook(fraction: float) -> None:
                # Replace replica i at (i + 1) / 5 of the schedule: surge one, drain one.
                i = step["next"]
                if i < REPLICAS and fraction >= (i + 1) / (REPLICAS + 1):
                    step["next"] = i + 1
                    run.changes.append(fraction * len(reqs) / rate)
                    table.append((REPLICAS + i + 1, spare[i]))
                    await asyncio.to_thread(routes.set, policy, list(table))
                    del table[0]
                    await asyncio.to_thread(routes.set, policy, list(table))

            progress = progress_hook
        run.results, run.wall = asyncio.run(
            drive(reqs, rate, args.scale, lb_port, active, progress)
        )
    finally:
        stop_process(lb)
    return run


# report ------------------------------------------------------------------------
HEADERS = ["policy", "TTFT p50 ms", "TTFT p99 ms", "tokens/s", "cache hit", "failed"]


WINDOW = 12  # requests per point of the plot's rolling median


def plot(runs: list[Run], workload: str) -> Path | None:
    """TTFT over time: a rolling median per row (single requests swing 10x between a
    hit and a miss, so raw points hide the trend), with a rolling update's steps."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for run in runs:
        if run.workload != workload:
            continue
        points = sorted((r.sent, r.ttft) for r in run.ok if r.ttft is not None)
        window = max(1, min(WINDOW, len(points) // 2))  # a smoke run has a few points
        xs = [points[i][0] for i in range(window - 1, len(points))]
        ys = [
            sorted(p[1] for p in points[i - window + 1 : i + 1])[window // 2]
            for i in range(window - 1, len(points))
        ]
        style = "--" if run.row == UPDATE_ROW else "-"
        ax.plot(xs, ys, style, lw=1.4, label=run.row)
        for at in run.changes:
            ax.axvline(at, color="grey", lw=0.6, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("request sent at (model seconds); dotted: a rolling update replaces a replica")
    ax.set_ylabel(f"TTFT, median of {WINDOW} (model s)")
    ax.set_title(f"Time to first token over time, {workload} workload, 4 simulated engines")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = plot_path("llm_routing.png")
    fig.savefig(path, dpi=110)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25, help="engine time / model time")
    p.add_argument("--workloads", default="chat,shared,uniform")
    p.add_argument("--rows", default=",".join([*ROWS, ORACLE, UPDATE_ROW]))
    p.add_argument("--smoke", action="store_true", help="tiny workloads, a few seconds")
    p.add_argument("--seed", type=int, default=32)
    p.add_argument("--engine", choices=["sim", "llama"], default="sim")
    p.add_argument("--llama-server", help="--engine llama: the llama-server binary")
    p.add_argument("--model", type=Path, help="--engine llama: a GGUF (default: tiny_gguf's)")
    args = p.parse_args()
    if args.engine == "llama":
        import llm_llama

        return llm_llama.main_llama(args, p)
    rng = random.Random(args.seed)
    if args.smoke:
        args.scale = min(args.scale, 0.05)
        sizes = {"sessions": 3, "turns": 2, "n": 6}
        if args.rows == p.get_default("rows"):
            args.rows = f"least_load,prefix_affinity,{ORACLE}"
    else:
        sizes = {"sessions": 24, "turns": 8, "n": 128}
    workloads = {
        "chat": lambda: chat_workload(sizes["sessions"], sizes["turns"], rng),
        "shared": lambda: shared_workload(sizes["n"], 6, rng),
        "uniform": lambda: uniform_workload(sizes["n"] * 3, rng),
    }
    rows = [r for r in args.rows.split(",") if r]
    chosen = [w for w in args.workloads.split(",") if w]
    print(f"# llm_routing: {machine_line()}; engine time scale {args.scale}")
    runs: list[Run] = []
    home = Path(tempfile.mkdtemp(prefix="steady-bench-llm-"))
    engine_proc, ports = engines(2 * REPLICAS, args.scale, str(home))
    routes = RouteServer(home)
    try:
        for name in chosen:
            reqs = workloads[name]()
            for r in reqs:
                r.tokens = prompt_tokens(r.body)
            rate = rate_for(reqs)
            distinct = distinct_tokens(reqs)
            print(
                f"\n## {name}: {len(reqs)} requests, {distinct} distinct prompt tokens,"
                f" {rate:.2f} requests per model second"
            )
            for row in rows:
                if row == UPDATE_ROW and name != "chat":
                    continue
                run = run_row(row, name, reqs, rate, args, home, routes, ports)
                runs.append(run)
                print("  " + " | ".join(run.figures()), flush=True)
                errors = [r.error for r in run.results if r.error]
                if errors:
                    print(f"  {len(errors)} failed, the first: {errors[0]}")
            print(table(HEADERS, [r.figures() for r in runs if r.workload == name]))
    finally:
        routes.close()
        assert engine_proc.stdin is not None
        engine_proc.stdin.close()
        stop_process(engine_proc)
    path = plot(runs, "chat" if "chat" in chosen else chosen[0])
    if path is not None:
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
