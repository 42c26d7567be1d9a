"""``prefix_affinity``: send a prompt where its prefix is likely in the KV cache.

An LLM engine that already holds a prompt's prefix in its KV cache skips most
of that prompt's prefill, so the time to first token depends on where the
request goes. The load balancer cannot see the engines' caches; it remembers
instead what it sent where. A prompt (its raw UTF-8 bytes, no tokenizer) is cut
into blocks of ``block_bytes`` and hashed as a chain: block i's hash covers
blocks 0..i, so two prompts share hash i exactly when they share their first
i + 1 blocks (up to hash collisions, which only cost a worse choice). Each
replica has a bounded LRU index of the chain hashes sent to it
(:class:`PrefixIndex`); the longest match wins unless that replica is
``imbalance_threshold`` requests busier than the least loaded one (as Ray
Serve's ``PrefixCacheAffinityRouter``), and a prompt that matches nowhere goes
to the least loaded replica, so new prefixes spread.

The hashes are Python's ``hash`` (SipHash keyed per process): cheap, and a
hash from one load-balancer process means nothing outside it, so nothing a
client sent is ever kept or logged in clear. The index is per load-balancer
worker (docs/load-balancer.md says what that costs).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Sequence

from steadyserve.core.routing.options import DEFAULT_OPTIONS, PolicyOptions
from steadyserve.core.routing.policies import (
    NO_EXCLUDE,
    NO_KEY,
    C,
    has_room,
    least_loaded,
    load_of,
)

PROMPT_KEY = "prompt"
"""The request key ``prefix_affinity`` asks for: the prompt's chain of hashes."""


def chain(prompt: bytes, block_bytes: int) -> tuple[int, ...]:
    """The chain hashes of ``prompt``'s whole blocks (a trailing partial block is
    left out: the next turn of a conversation usually extends it, so it would
    not match anyway). An empty tuple when the prompt is shorter than a block."""
    out: list[int] = []
    append = out.append
    h = 0
    for start in range(0, len(prompt) - block_bytes + 1, block_bytes):
        h = hash((h, prompt[start : start + block_bytes]))
        append(h)
    return tuple(out)


class PrefixIndex:
    """Per replica, the chain hashes most recently sent there, at most ``limit``.

    A chain is recorded deepest block first, so its first blocks are the most
    recent and the last evicted: like an engine's LRU cache, a long history
    loses its tail before its shared head.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: dict[int, OrderedDict[int, None]] = {}

    def match(self, replica_id: int, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` the replica was sent."""
        entries = self.entries.get(replica_id)
        if not entries:
            return 0
        n = 0
        for h in hashes:
            if h not in entries:
                break
            n += 1
        return n

    def record(self, replica_id: int, hashes: Sequence[int]) -> None:
        entries = self.entries.get(replica_id)
        if entries is None:
            entries = self.entries[replica_id] = OrderedDict()
        limit = self.limit
        touch = entries.move_to_end
        for h in reversed(hashes[:limit]):
            if h in entries:
                touch(h)
            else:
                entries[h] = None  # a new key goes to the end by itself
        while len(entries) > limit:
            entries.popitem(last=False)

    def forget(self, replica_id: int) -> None:
        self.entries.pop(replica_id, None)

    def size(self, replica_id: int) -> int:
        entries = self.entries.get(replica_id)
        return len(entries) if entries else 0


class PrefixAffinity:
    """Longest cached prefix unless that replica is overloaded; else least loaded.

    ``key`` is the request's chain (:func:`chain`), or None for a request with no
    prompt the LB could read (not JSON, another path, a handle's call): those go
    to the least loaded replica and are not recorded.
    """

    name = "prefix_affinity"
    request_key: str | None = PROMPT_KEY

    def __init__(self, options: PolicyOptions = DEFAULT_OPTIONS) -> None:
        self.options = options
        self.index = PrefixIndex(options.max_entries_per_replica)
        self._start = 0

    def choose(
        self,
        replicas: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        hashes: tuple[int, ...] = key if isinstance(key, tuple) else ()
        index = self.index
        n = len(replicas)
        start = self._start % n if n else 0
        self._start = start + 1
        # From a rotating start, so ties (all idle, nothing matched) spread out.
        least = least_loaded(replicas, start, load_of, max_ongoing, exclude, floor=None)
        if least is None:
            return None
        least_load = load_of(least)
        best: C | None = None
        best_match = 0
        best_load = 0.0
        for i in range(n if hashes else 0):  # the longest prefix sent before, least loaded
            r = replicas[(start + i) % n]
            if r.id in exclude or not has_room(r.inflight, max_ongoing):
                continue
            m = index.match(r.id, hashes)
            if m > best_match or (m == best_match and best is not None and load_of(r) < best_load):
                best, best_match, best_load = r, m, load_of(r)
        if best is None or best_load - least_load > self.options.imbalance_threshold:
            best = least
        if hashes:
            index.record(best.id, hashes)
        return best

    def forget(self, replica_id: int) -> None:
        """The replica left the table (drained, replaced, restarted): its cache is
        gone or about to be, and its prefixes go where the next requests land."""
        self.index.forget(replica_id)
