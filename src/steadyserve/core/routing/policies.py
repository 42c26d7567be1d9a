"""Routing policies: which replica gets the next request, for the load balancer and
for handles alike (one interface: ``Policy.choose(candidates, max_ongoing, exclude, key)``).

Pure functions of what a candidate carries (no I/O, no clock), so they are
tested exhaustively without sockets. A candidate (:class:`Candidate`) carries
what any policy may weigh: its in-flight count, version, capacity and
accelerator (the route table's fields, wire/routes.py). ``request_key`` is
what a request-aware policy asked the load balancer to extract from the request
(:attr:`Policy.request_key` says what: prefix_affinity the prompt, session_affinity
a header, cookie or JSON field); it is None for the policies that ask for nothing
(least_load, round_robin, power_of_two, instance_aware_least_load). A policy only
ever picks a replica that is
below ``max_ongoing`` and not in ``exclude`` (replicas already tried for this
request, or ejected after a refused connection); it returns ``None`` only when no
replica is eligible, which the proxy turns into queueing or an error.

Every policy is registered by its name in registry.py. Policies keep a little
state of their own (a rotating start, a random generator),
so one instance lives as long as the load balancer's routing table says to use it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Container, Sequence
from operator import attrgetter
from typing import Protocol, TypeVar


class Candidate(Protocol):
    """What a policy may know about a replica."""

    @property
    def id(self) -> int: ...

    @property
    def inflight(self) -> int: ...

    @property
    def version(self) -> int: ...

    @property
    def capacity(self) -> float: ...

    @property
    def accelerator(self) -> str | None: ...


C = TypeVar("C", bound=Candidate)

NO_EXCLUDE: frozenset[int] = frozenset()


def has_room(inflight: int, max_ongoing: int) -> bool:
    """``max_ongoing <= 0`` means no per-replica limit."""
    return max_ongoing <= 0 or inflight < max_ongoing


_has_room = has_room

inflight_of: Callable[[Candidate], float] = attrgetter("inflight")
"""A candidate's load for the policies that weigh in-flight requests (a C getter: this
is the load balancer's per-request path)."""


def least_loaded(
    replicas: Sequence[C],
    start: int,
    load: Callable[[C], float],
    max_ongoing: int,
    exclude: Container[int] = NO_EXCLUDE,
    *,
    floor: float | None = 0,
) -> C | None:
    """The one least-load scan: of the replicas below ``max_ongoing`` in flight and not
    in ``exclude``, the one whose ``load`` is least, ties going to the first found
    from index ``start`` on (a rotating start spreads sequential requests). None when
    none is eligible. The scan stops at a load of ``floor``, which nothing can beat
    (0 for counts; None scans every replica: a load a replica reports may be negative)."""
    n = len(replicas)
    best: C | None = None
    best_load = 0.0
    for i in range(n):
        r = replicas[(start + i) % n]
        if r.id in exclude or (max_ongoing > 0 and r.inflight >= max_ongoing):
            continue
        value = load(r)
        if best is None or value < best_load:
            best = r
            best_load = value
            if value == floor:
                break
    return best


def load_of(candidate: Candidate) -> float:
    """How busy a replica is for the request-aware policies: the queue its own
    metrics report (``queue``, set while a scrape is fresh: lb/replica_metrics.py),
    else this load balancer's in-flight count."""
    queue: float | None = getattr(candidate, "queue", None)
    return candidate.inflight if queue is None else queue


NO_KEY = None
"""The request key of a request the policy does not read."""


class Policy(Protocol):
    """Choose one of ``candidates`` for the next request, or None if none is eligible.

    ``request_key`` names what the load balancer must extract from a request for
    this policy before it chooses (None: nothing; the request is not read)."""

    name: str
    request_key: str | None

    def choose(
        self,
        candidates: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None: ...

    def forget(self, replica_id: int) -> None:
        """The replica left the table: drop whatever the policy remembers of it."""


class LeastLoad:
    """Fewest in-flight requests; ties go to the first replica after a rotating start.

    Rotating the start matters: with sequential traffic every replica has zero
    in-flight requests at each pick, and a fixed scan order would send everything
    to the first replica.
    """

    name = "least_load"
    request_key: str | None = None

    def __init__(self) -> None:
        self._start = 0

    def choose(
        self,
        replicas: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        n = len(replicas)
        if n == 0:
            return None
        start = self._start % n
        self._start = start + 1
        return least_loaded(replicas, start, inflight_of, max_ongoing, exclude)

    def forget(self, replica_id: int) -> None:
        """Nothing is kept per replica."""


class RoundRobin:
    """Each eligible replica in turn, skipping full or excluded ones."""

    name = "round_robin"
    request_key: str | None = None

    def __init__(self) -> None:
        self._next = 0

    def choose(
        self,
        replicas: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        n = len(replicas)
        start = self._next % n if n else 0
        for i in range(n):
            idx = (start + i) % n
            r = replicas[idx]
            if _has_room(r.inflight, max_ongoing) and r.id not in exclude:
                self._next = idx + 1
                return r
        return None

    def forget(self, replica_id: int) -> None:
        """Nothing is kept per replica."""


class PowerOfTwo:
    """Two random eligible replicas; the less loaded one wins (ties: the first drawn).

    Cheap like random choice, yet avoids piling onto a slow replica; the RNG is
    injectable so tests are deterministic.
    """

    name = "power_of_two"
    request_key: str | None = None

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()

    def choose(
        self,
        replicas: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        eligible = [
            r for r in replicas if _has_room(r.inflight, max_ongoing) and r.id not in exclude
        ]
        if len(eligible) <= 1:
            return eligible[0] if eligible else None
        a, b = self._rng.sample(eligible, 2)
        return b if b.inflight < a.inflight else a

    def forget(self, replica_id: int) -> None:
        """Nothing is kept per replica."""
