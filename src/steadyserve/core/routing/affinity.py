"""``session_affinity``: consistent hashing with bounded loads.

A chat session or an agent loop keeps its KV cache warm if every request of it
goes to the same replica. The key (``service.load_balancer.affinity_key``: a
header, a cookie or a JSON field of the body) is hashed onto a ring of virtual
nodes; the request goes to the first replica clockwise whose load is below
``ceil((1 + epsilon) * (total + 1) / n)`` (Mirrokni, Thorup and Zadimoghaddam,
"Consistent Hashing with Bounded Loads", as HAProxy's ``hash-balance-factor``),
so no replica takes more than ``(1 + epsilon)`` times the mean, a key moves only
when its replica leaves or is full, and a removed replica's keys spread over
the others (each to its next point on the ring, not all to one neighbour).

Ring positions and key hashes are BLAKE2b, identical in every process, so every
load-balancer worker sends a key to the same replica while loads are even; a
key's hash is all the policy keeps, never the key.
"""

from __future__ import annotations

import bisect
import hashlib
import math
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

VNODES = 64
"""Points per replica: enough that 4 replicas split the ring within ~15%."""


def stable_hash(data: bytes) -> int:
    """64 bits of BLAKE2b: the same in every process (Python's ``hash`` is not)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class Ring:
    """The hash ring of one set of replica ids."""

    def __init__(self, ids: Sequence[int], vnodes: int = VNODES) -> None:
        points = sorted(
            (stable_hash(b"%d/%d" % (rid, v)), rid) for rid in set(ids) for v in range(vnodes)
        )
        self.hashes = [h for h, _ in points]
        self.owners = [rid for _, rid in points]

    def walk(self, key_hash: int) -> list[int]:
        """Every replica id once, in ring order from ``key_hash``."""
        owners = self.owners
        n = len(owners)
        start = bisect.bisect_left(self.hashes, key_hash)
        seen: list[int] = []
        for i in range(n):
            rid = owners[(start + i) % n]
            if rid not in seen:
                seen.append(rid)
        return seen


def bound(total_load: float, n: int, epsilon: float) -> int:
    """The most a replica may hold once the next request is placed."""
    return math.ceil((1 + epsilon) * (total_load + 1) / n)


class SessionAffinity:
    """The key's replica on the ring, unless it is at the bound; then the next.

    ``key`` is the request's affinity key as bytes, or None when the request has
    none (no such header, cookie or field; a handle's call): the least loaded
    replica takes it.
    """

    name = "session_affinity"

    def __init__(self, options: PolicyOptions = DEFAULT_OPTIONS) -> None:
        self.options = options
        self.request_key: str | None = options.affinity_key
        self._ring_for: tuple[int, ...] = ()
        self._ring = Ring(())
        self._start = 0

    def ring(self, ids: tuple[int, ...]) -> Ring:
        if ids != self._ring_for:
            self._ring, self._ring_for = Ring(ids), ids
        return self._ring

    def choose(
        self,
        replicas: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        eligible = {
            r.id: r for r in replicas if r.id not in exclude and has_room(r.inflight, max_ongoing)
        }
        if not eligible:
            return None
        if not isinstance(key, bytes):
            return self._least(replicas, max_ongoing, exclude)
        # The ring spans every candidate, eligible or not, so a full replica
        # keeps its keys' positions and gets them back once it has room.
        ring = self.ring(tuple(r.id for r in replicas))
        loads = {rid: load_of(r) for rid, r in eligible.items()}
        cap = bound(sum(loads.values()), len(eligible), self.options.affinity_epsilon)
        for rid in ring.walk(stable_hash(key)):
            if rid in eligible and loads[rid] < cap:
                return eligible[rid]
        return self._least(
            replicas, max_ongoing, exclude
        )  # unreachable: some load is below the mean

    def _least(self, replicas: Sequence[C], max_ongoing: int, exclude: Container[int]) -> C:
        start = self._start % len(replicas)
        self._start = start + 1
        best = least_loaded(replicas, start, load_of, max_ongoing, exclude, floor=None)
        assert best is not None  # called with some replica eligible
        return best

    def forget(self, replica_id: int) -> None:
        """Nothing to forget: the ring is rebuilt from the candidates it is given."""
