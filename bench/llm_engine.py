"""A simulated prefix-caching LLM engine, for bench/llm_routing.py.

It models what decides an LLM server's time to first token, with fixed
parameters (the issue's, not tuned to any result):

- a KV cache of 32,768 tokens per replica, in blocks of 16 tokens, evicted
  least recently used (vLLM's automatic prefix caching, without pinning);
- a token is 4 bytes of the prompt text (no tokenizer); the prompt text is the
  messages' roles and contents, in order, so a conversation's next turn extends
  the previous turn's prompt;
- prefill costs 0.2 ms per token not already in the cache, one prefill at a
  time per replica (prefill is compute-bound: concurrent prefills share it);
- decode costs 20 ms per token; 8 sequences decode concurrently, more wait;
- each answer is 16 tokens, streamed as OpenAI-style SSE chunks; the last
  chunk carries ``usage`` with ``prompt_tokens`` and ``cached_tokens``.

The engine really sleeps for each phase, scaled by ``--scale`` (0.25: four
times faster than the model, so a run fits the 2 shared cores' budget; the
driver divides measured times by it). ``POST /-/probe`` answers how many of a
prompt's tokens are cached and how busy the replica is (the oracle's view);
``POST /-/reset`` empties the cache (a restart, between rows).

    python bench/llm_engine.py --replicas 8 --scale 0.25   # prints {"ports": [...]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import OrderedDict
from typing import Any

from aiohttp import web

CACHE_TOKENS = 32_768
BLOCK_TOKENS = 16
BYTES_PER_TOKEN = 4
PREFILL_S_PER_TOKEN = 0.0002
DECODE_S_PER_TOKEN = 0.020
MAX_SEQS = 8
ANSWER_TOKENS = 16


def prompt_text(body: dict[str, Any]) -> bytes:
    if "messages" in body:
        return "".join(f"<{m['role']}>{m['content']}" for m in body["messages"]).encode()
    return str(body.get("prompt", "")).encode()


def blocks(text: bytes) -> list[int]:
    """Chain hashes of the prompt's whole 16-token blocks."""
    size = BLOCK_TOKENS * BYTES_PER_TOKEN
    out, h = [], 0
    for start in range(0, len(text) - size + 1, size):
        h = hash((h, text[start : start + size]))
        out.append(h)
    return out


class Engine:
    def __init__(self, name: str, scale: float) -> None:
        self.name = name
        self.scale = scale
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.capacity_blocks = CACHE_TOKENS // BLOCK_TOKENS
        self.slots = asyncio.Semaphore(MAX_SEQS)
        self.prefill = asyncio.Lock()
        self.active = 0  # admitted or waiting: the queue the oracle sees

    def cached_blocks(self, chain: list[int]) -> int:
        n = 0
        for h in chain:
            if h not in self.cache:
                break
            n += 1
        return n

    def insert(self, chain: list[int]) -> None:
        for h in chain:
            self.cache[h] = None
            self.cache.move_to_end(h)
        while len(self.cache) > self.capacity_blocks:
            self.cache.popitem(last=False)

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = prompt_text(body)
        tokens = max(1, len(text) // BYTES_PER_TOKEN)
        chain = blocks(text)
        self.active += 1
        try:
            async with self.slots:
                async with self.prefill:
                    hit = self.cached_blocks(chain)
                    cached = min(hit * BLOCK_TOKENS, tokens)
                    await asyncio.sleep((tokens - cached) * PREFILL_S_PER_TOKEN * self.scale)
                    self.insert(chain)
                response = web.StreamResponse(
                    headers={"Content-Type": "text/event-stream", "X-Replica": self.name}
                )
                await response.prepare(request)
                for i in range(ANSWER_TOKENS):
                    await asyncio.sleep(DECODE_S_PER_TOKEN * self.scale)
                    chunk: dict[str, Any] = {"choices": [{"delta": {"content": f" t{i}"}}]}
                    if i == ANSWER_TOKENS - 1:
                        chunk["usage"] = {
                            "prompt_tokens": tokens,
                            "cached_tokens": cached,
                            "completion_tokens": ANSWER_TOKENS,
                        }
                    await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
                return response
        finally:
            self.active -= 1

    async def probe(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = prompt_text(body)
        cached = self.cached_blocks(blocks(text)) * BLOCK_TOKENS
        return web.json_response({"cached": cached, "active": self.active})

    async def reset(self, request: web.Request) -> web.Response:
        self.cache.clear()
        return web.json_response({"ok": True})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")


async def serve(replicas: int, scale: float) -> None:
    ports = []
    runners = []
    for i in range(replicas):
        engine = Engine(f"engine{i + 1}", scale)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", engine.complete)
        app.router.add_post("/v1/completions", engine.complete)
        app.router.add_post("/-/probe", engine.probe)
        app.router.add_post("/-/reset", engine.reset)
        app.router.add_get("/health", engine.health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        runners.append(runner)
    print(json.dumps({"ports": ports}), flush=True)
    # Until the driver closes our stdin (or is gone).
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    for runner in runners:
        await runner.cleanup()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--scale", type=float, default=0.25)
    args = p.parse_args()
    asyncio.run(serve(args.replicas, args.scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
