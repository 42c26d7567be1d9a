"""The workloads of bench/llm_routing.py: fixed, seeded, and their arrival rate.

- chat: multi-turn sessions, each from its own ~2k-token system prompt and a
  ~250-token question a turn, interleaved in a fresh random order each round;
  a turn waits for the previous turn of its session;
- shared: requests over a few long (~6k-token) system prompts, each with its
  own ~100-token question;
- uniform: unrelated ~2k-token prompts.

Sizes are in the simulated engine's tokens (4 bytes of text); the real-engine
rows (bench/llm_llama.py) pass smaller ones.

The rate keeps the fleet BUSY (70%) if every prefill were cold, which is what
least_load gets on the chat workload: prefill (0.2 ms per token, one at a time
per replica) is the engine's bottleneck.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

REPLICAS = 4
BUSY = 0.7
PREFILL_S_PER_TOKEN = 0.0002
BYTES_PER_TOKEN = 4


WORDS = [
    "the",
    "of",
    "and",
    "a",
    "to",
    "in",
    "is",
    "you",
    "that",
    "it",
    "he",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
]


def text(rng: random.Random, tokens: int) -> str:
    out: list[str] = []
    size = 0
    while size < tokens * BYTES_PER_TOKEN:
        word = rng.choice(WORDS) + str(rng.randrange(1000))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


ANSWER = "".join(f" t{i}" for i in range(16))  # what the engine streams back


@dataclass
class Req:
    index: int  # its place in the arrival schedule
    body: dict[str, Any]
    after: int | None = None  # the index of the request it must wait for (previous turn)
    tokens: int = 0


def chat_workload(
    sessions: int, turns: int, rng: random.Random, system: int = 2000, question: int = 250
) -> list[Req]:
    reqs: list[Req] = []
    histories = [[{"role": "system", "content": text(rng, system)}] for _ in range(sessions)]
    last: dict[int, int] = {}
    order = list(range(sessions))
    for _turn in range(turns):
        # A fresh interleaving each round: a fixed one would make round_robin's
        # rotation line up with the sessions (24 is a multiple of 4 replicas).
        rng.shuffle(order)
        for s in order:
            history = histories[s]
            history.append({"role": "user", "content": text(rng, question)})
            body = {"model": "sim", "messages": list(history), "max_tokens": 16, "stream": True}
            body["user"] = f"session-{s}"
            index = len(reqs)
            reqs.append(Req(index, body, last.get(s)))
            last[s] = index
            history.append({"role": "assistant", "content": ANSWER})
    return reqs


def shared_workload(
    n: int, prompts: int, rng: random.Random, system: int = 6000, question: int = 100
) -> list[Req]:
    systems = [text(rng, system) for _ in range(prompts)]
    reqs = []
    for i in range(n):
        messages = [
            {"role": "system", "content": rng.choice(systems)},
            {"role": "user", "content": text(rng, question)},
        ]
        body = {"model": "sim", "messages": messages, "max_tokens": 16, "stream": True}
        reqs.append(Req(i, {**body, "user": f"request-{i}"}))
    return reqs


def uniform_workload(n: int, rng: random.Random, size: int = 2000) -> list[Req]:
    reqs = []
    for i in range(n):
        messages = [{"role": "user", "content": text(rng, size)}]
        body = {"model": "sim", "messages": messages, "max_tokens": 16, "stream": True}
        reqs.append(Req(i, {**body, "user": f"request-{i}"}))
    return reqs


def prompt_tokens(body: dict[str, Any]) -> int:
    return sum(len(f"<{m['role']}>{m['content']}") for m in body["messages"]) // BYTES_PER_TOKEN


def rate_for(reqs: list[Req]) -> float:
    """Requests per model second that keep the fleet BUSY with every prefill cold."""
    mean_prefill = sum(r.tokens for r in reqs) / len(reqs) * PREFILL_S_PER_TOKEN
    return BUSY * REPLICAS / mean_prefill


def distinct_tokens(reqs: list[Req]) -> int:
    """Prompt tokens counted once per distinct 64-byte prefix block (what caches hold)."""
    seen: set[int] = set()
    for r in reqs:
        text_bytes = "".join(f"<{m['role']}>{m['content']}" for m in r.body["messages"]).encode()
        h = 0
        for start in range(0, len(text_bytes) - 63, 64):
            h = hash((h, text_bytes[start : start + 64]))
            seen.add(h)
    return len(seen) * 16
