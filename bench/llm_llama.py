"""The real-engine rows of bench/llm_routing.py: llama.cpp's llama-server.

``python bench/llm_routing.py --engine llama --llama-server PATH`` puts four
real ``llama-server`` processes (127.0.0.1, one port each) behind SteadyServe's
real load balancer, whose route table llm_routing.py serves as the controller
would, and runs the simulated rows' workloads on them. The model is the
random-weight tiny llama of bench/tiny_gguf.py (written into the run's temp
dir unless ``--model`` names one): its text is noise, its prefill and KV cache
are real.

Scaled to 2 shared cores, and why:

- each engine runs ``-t 1`` (four engines on 2 cores), ``-np 2`` (two slots;
  a slot keeps its last prompt's KV, which is the prefix cache), ``-c 8192``
  (4096 tokens a slot) and ``-cram 0``: llama-server's default 8 GiB host
  prompt cache would let every engine keep every prefix, and then where a
  request goes would not matter. Engines are restarted between rows (a warm
  cache would carry over);
- a token is a character (the tiny model's vocabulary), so prompts are 4
  times fewer bytes than the simulated rows' for a similar token count, and
  shorter (a cold ~2,300-token prompt took 6 s on this machine under load,
  which would make a run take over half an hour): chat is 8 sessions of 5
  turns from ~600-token system prompts with ~80-token questions (8 prefixes:
  the 8 slots of the fleet hold them, one engine's 2 do not); shared is 32
  requests over 4 ~800-token system prompts with ~50-token questions (4
  prefixes: more than one engine's 2 slots); uniform is 24 unrelated
  ~800-token prompts. 16 tokens are generated (``ignore_eos``);
- the arrival rate keeps the machine 70% busy if every prefill were cold,
  with the cold prefill cost measured at the start (median of 3 cold
  requests, one at a time) and 2 engines' worth of parallelism (the 2 cores,
  not the 4 engines). No time is scaled: every time printed is measured;
- the rolling-update row and power_of_two are the simulated rows' only.

Figures per row: TTFT p50/p99 (the first streamed token), tokens/s (generated
tokens over the row's wall time), cache hit rate (the sum of llama-server's
``timings.cache_n`` over the sum of ``cache_n + prompt_n``, from the last
streamed chunk of ``/v1/completions``), failed requests, and the load average
before the row (the cores are shared with other work).

The oracle asks each engine's ``GET /slots`` (with LLAMA_SERVER_SLOTS_DEBUG=1,
which adds each slot's prompt) for the longest common prefix of the request's
prompt with a slot's, counts the requests it has in flight to each engine, and
sends the request to the best match unless that engine has more than
``ORACLE_IMBALANCE`` more in flight than the least busy one. A prompt cached
nowhere goes to the least busy engine, among equals to one with a never-used
slot, then in turn. A match counts only above llama-server's own slot
similarity threshold (10% of the prompt): every prompt shares its first few
characters with every other, and counting those sent nearly every request of
a first run to the first engine (24% hits, below the blind policies' rows).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from benchlib import free_port, machine_line, stop_process, table
from llm_routing import HEADERS, ORACLE, REPLICAS, Result, RouteServer, Run, start_lb
from llm_workloads import Req, chat_workload, shared_workload, uniform_workload

ROWS = ["round_robin", "least_load", "prefix_affinity", "session_affinity", ORACLE]
SLOTS = 2
CONTEXT = 8192
THREADS = 1
ANSWER_TOKENS = 16
BUSY = 0.7
ORACLE_IMBALANCE = SLOTS  # a whole engine's worth of slots queued
SLOT_SIMILARITY = 0.1  # llama-server's --slot-prompt-similarity default
READY_S = 60.0
REQUEST_TIMEOUT_S = 300.0


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """The simulated rows' chat body as a /v1/completions body with the same text.

    The prompt goes last: the LB's prefix_affinity hashes the body from the
    prompt's value on, so fields after it only touch its last block."""
    prompt = "".join(f"<{m['role']}>{m['content']}" for m in body["messages"])
    return {
        "user": body["user"],
        "n_predict": ANSWER_TOKENS,
        "ignore_eos": True,  # random weights may well sample the end token first
        "stream": True,
        "cache_prompt": True,
        "temperature": 0.0,
        "prompt": prompt,
    }


def workloads(seed: int) -> dict[str, list[Req]]:
    rng = random.Random(seed)
    # Sizes in llm_workloads' units (4 characters); one character is one token here.
    built = {
        "chat": chat_workload(8, 5, rng, system=150, question=20),
        "shared": shared_workload(32, 4, rng, system=200, question=12),
        "uniform": uniform_workload(24, rng, size=200),
    }
    for reqs in built.values():
        for r in reqs:
            r.body = completion(r.body)
            r.tokens = len(r.body["prompt"])
    return built


# the engines -------------------------------------------------------------------
def start_engines(
    server: str, model: Path, logs: Path, count: int
) -> list[tuple[subprocess.Popen[bytes], int]]:
    """``count`` fresh llama-servers, each answering /health 200, or RuntimeError."""
    started: list[tuple[subprocess.Popen[bytes], int]] = []
    env = {**os.environ, "LLAMA_SERVER_SLOTS_DEBUG": "1"}  # /slots shows prompts
    try:
        for i in range(count):
            port = free_port()
            log = open(logs / f"engine{i + 1}.log", "ab")  # noqa: SIM115 - the process holds it
            argv = [
                server,
                *("-m", str(model), "--host", "127.0.0.1", "--port", str(port)),
                *("-t", str(THREADS), "-tb", str(THREADS), "-np", str(SLOTS)),
                *("-c", str(CONTEXT), "-cram", "0", "--no-kv-unified"),
            ]
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
            started.append((proc, port))
        for i, (proc, port) in enumerate(started):
            wait_ready(proc, port, logs / f"engine{i + 1}.log")
    except BaseException:
        stop_engines(started)
        raise
    return started


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"llama-server exited {proc.returncode}: {tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llama-server on port {port} not ready in {READY_S:.0f} s (see {log})")


def stop_engines(engines: list[tuple[subprocess.Popen[bytes], int]]) -> None:
    for proc, _port in engines:
        stop_process(proc)


# one request -------------------------------------------------------------------
async def stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], started: float
) -> Result:
    """One streamed completion: TTFT at the first token's chunk, the cache
    figures from the last chunk's ``timings``."""
    t0 = time.monotonic()
    result = Result(sent=t0 - started, ttft=None)
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
                data = line[6:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if first is None and chunk.get("choices"):
                    first = time.monotonic()
                timings = chunk.get("timings")
                if timings:
                    result.cached = int(timings["cache_n"])
                    result.prompt = int(timings["cache_n"]) + int(timings["prompt_n"])
                    result.tokens = int(timings["predicted_n"])
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError) as exc:
        result.error = repr(exc)
        return result
    if not done or first is None or not result.prompt:
        result.error = "the stream ended before [DONE] and the timings"
        return result
    result.ttft = first - t0
    result.done = time.monotonic() - started
    return result


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Oracle:
    """Routes by what each engine's slots really hold (GET /slots)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.inflight = dict.fromkeys(ports, 0)
        self.turn = 0  # rotates ties, so cold prompts do not all land on the first engine

    async def view(self, session: aiohttp.ClientSession, port: int, prompt: str) -> tuple[int, int]:
        """The longest cached prefix of ``prompt`` there, and its never-used slots."""
        async with session.get(f"http://127.0.0.1:{port}/slots") as resp:
            slots = await resp.json()
        best = empty = 0
        for slot in slots:
            if not slot.get("prompt"):
                empty += 1
                continue
            # Detokenized with specials: the BOS and SentencePiece's leading space.
            held = str(slot["prompt"]).removeprefix("<s>").removeprefix(" ")
            best = max(best, common_prefix(held, prompt))
        # What llama-server itself reuses: a slot whose prompt shares more than
        # SLOT_SIMILARITY of this one (below it, it takes the least recently used
        # slot). Every prompt here starts "<system>": that is no cached prefix.
        return (best if best > SLOT_SIMILARITY * len(prompt) else 0), empty

    async def choose(self, session: aiohttp.ClientSession, prompt: str) -> int:
        views = await asyncio.gather(*(self.view(session, p, prompt) for p in self.ports))
        n = len(self.ports)
        # The least busy engine; among equals, one with a never-used slot (a cold
        # prompt there evicts nothing), then in turn.
        least_i = min(
            range(n),
            key=lambda i: (self.inflight[self.ports[i]], -views[i][1], (i - self.turn) % n),
        )
        least = self.ports[least_i]
        best_i = max(range(n), key=lambda i: (views[i][0], -self.inflight[self.ports[i]]))
        best = self.ports[best_i]
        if views[best_i][0] == 0 or self.inflight[best] - self.inflight[least] > ORACLE_IMBALANCE:
            self.turn = least_i + 1
            return least
        return best


async def drive(reqs: list[Req], rate: float, lb_port: int | None, ports: list[int]) -> Run:
    """Send ``reqs`` on their schedule, through the LB or (None) the oracle."""
    run = Run("", "")
    started = time.monotonic()
    done = {r.index: asyncio.Event() for r in reqs}
    results: list[Result | None] = [None] * len(reqs)
    oracle = Oracle(ports)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
    ) as session:

        async def one(req: Req) -> None:
            await asyncio.sleep(max(0.0, started + req.index / rate - time.monotonic()))
            if req.after is not None:
                await done[req.after].wait()
            try:
                if lb_port is None:
                    shift = time.monotonic()
                    port = await oracle.choose(session, req.body["prompt"])
                    shift = time.monotonic() - shift  # probes a real router would not pay
                    oracle.inflight[port] += 1
                    try:
                        url = f"http://127.0.0.1:{port}/v1/completions"
                        results[req.index] = await stream(session, url, req.body, started + shift)
                    finally:
                        oracle.inflight[port] -= 1
                else:
                    url = f"http://127.0.0.1:{lb_port}/v1/completions"
                    results[req.index] = await stream(session, url, req.body, started)
            finally:
                done[req.index].set()

        await asyncio.gather(*(one(r) for r in reqs))
    run.results = [r if r is not None else Result(0.0, None) for r in results]
    last = max((r.done for r in run.results if r.ttft is not None), default=0.0)
    run.wall = last - min((r.sent for r in run.results), default=0.0)
    return run


async def cold_seconds(ports: list[int], prompts: list[str]) -> list[float]:
    """TTFT of cold prompts, one at a time, each on its own fresh engine slot."""
    out = []
    async with aiohttp.ClientSession() as session:
        for i, prompt in enumerate(prompts):
            body = {**completion({"messages": [], "user": "calibration"}), "prompt": prompt}
            url = f"http://127.0.0.1:{ports[i % len(ports)]}/v1/completions"
            got = await stream(session, url, body, time.monotonic())
            if got.ttft is None:
                raise RuntimeError(f"calibration request failed: {got.error}")
            out.append(got.ttft / max(1, got.prompt - got.cached))
    return out


# the run -----------------------------------------------------------------------
def usage_error(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """The first bad real-engine option as one line naming it, or None."""
    if not args.llama_server or not os.access(args.llama_server, os.X_OK):
        return f"--llama-server: not an executable file: {args.llama_server}"
    if args.model is not None and not args.model.is_file():
        return f"--model: no such file: {args.model}"
    if args.rows == parser.get_default("rows"):
        args.rows = ",".join(ROWS)
    unknown = sorted(set(args.rows.split(",")) - {*ROWS, ""})
    if unknown:
        return f"--rows: not a real-engine row: {','.join(unknown)}"
    unknown = sorted(set(args.workloads.split(",")) - {"chat", "shared", "uniform", ""})
    if unknown:
        return f"--workloads: unknown: {','.join(unknown)}"
    return None


def main_llama(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    problem = usage_error(args, parser)
    if problem is not None:
        print(f"llm_routing.py: {problem}", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="steady-bench-llama-"))
    model = args.model
    if model is None:
        from tiny_gguf import write

        model = home / "tiny.gguf"
        write(model, args.seed)
    built = workloads(args.seed)
    rows = [r for r in args.rows.split(",") if r]
    chosen = [w for w in args.workloads.split(",") if w]
    parallel = min(REPLICAS, os.cpu_count() or 1)
    print(f"# llm_routing --engine llama: {machine_line()}")
    print(
        f"# {REPLICAS} x {args.llama_server} -t {THREADS} -np {SLOTS} -c {CONTEXT} -cram 0;"
        f" model {model}; logs in {home}"
    )
    routes = RouteServer(home)
    runs: list[tuple[Run, float]] = []
    try:
        engines = start_engines(args.llama_server, model, home, REPLICAS)
        try:
            calib_rng = random.Random(args.seed + 1)
            prompts = [completion(r.body)["prompt"] for r in uniform_workload(3, calib_rng, 200)]
            per_token = statistics.median(
                asyncio.run(cold_seconds([p for _, p in engines], prompts))
            )
        finally:
            stop_engines(engines)
        print(
            f"# cold prefill: {per_token * 1000:.3f} ms per token (median of 3), {parallel} cores"
        )
        for name in chosen:
            reqs = built[name]
            mean_cold = statistics.mean(r.tokens for r in reqs) * per_token
            rate = BUSY * parallel / mean_cold
            print(
                f"\n## {name}: {len(reqs)} requests, {sum(r.tokens for r in reqs)} prompt tokens"
                f" sent, {rate:.2f} requests/s (a cold prefill ~{mean_cold:.2f} s)"
            )
            for row in rows:
                load = os.getloadavg()[0]
                run = run_row(row, name, reqs, rate, args, home, routes)
                runs.append((run, load))
                print("  " + " | ".join([*run.figures(), f"{load:.1f}"]), flush=True)
                errors = [r.error for r in run.results if r.error]
                if errors:
                    print(f"  {len(errors)} failed, the first: {errors[0]}")
            print(
                table(
                    [*HEADERS, "load avg"],
                    [[*r.figures(), f"{ld:.1f}"] for r, ld in runs if r.workload == name],
                )
            )
    finally:
        routes.close()
    return 0


def run_row(
    row: str,
    workload: str,
    reqs: list[Req],
    rate: float,
    args: argparse.Namespace,
    home: Path,
    routes: RouteServer,
) -> Run:
    engines = start_engines(args.llama_server, args.model or home / "tiny.gguf", home, REPLICAS)
    ports = [p for _, p in engines]
    try:
        if row == ORACLE:
            run = asyncio.run(drive(reqs, rate, None, ports))
        else:
            lb, lb_port = start_lb(home)
            try:
                routes.set(row, [(i + 1, p) for i, p in enumerate(ports)])
                run = asyncio.run(drive(reqs, rate, lb_port, ports))
            finally:
                stop_process(lb)
    finally:
        stop_engines(engines)
    run.row, run.workload = row, workload
    return run
