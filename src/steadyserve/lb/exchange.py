"""One request and its response inside the load balancer: its phases and the moves
between them.

The phase used to be a bare int written from several modules and compared by
order (``state > READY``), so a new phase or a new writer could quietly change
what a comparison meant. Here every phase is a member of ``Phase``, ``ALLOWED``
lists every legal move, and ``Proxy`` (lb/proxy.py) is the only code that
changes a phase, through ``step``, which refuses a move the table does not list.
Pure: no I/O, no event loop.

An exchange goes, on the usual path::

    PARSING -> READY -> SENT -> DONE

READY -> WAITING when every replica is at ``max_ongoing_requests`` (or the
service is at zero), READY/WAITING -> CONNECTING when no pooled connection is
free, CONNECTING/SENT -> READY when an attempt failed and is retried on another
replica, and any phase -> DONE when the request is answered, locally or by a
replica, or its client leaves. DONE is final.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from enum import IntEnum
from time import perf_counter
from typing import TYPE_CHECKING

from steadyserve.wire.counts import COMPLETED

if TYPE_CHECKING:
    from steadyserve.lb.balancer import ReplicaState
    from steadyserve.lb.downstream import ClientConnection
    from steadyserve.lb.upstream import UpstreamConnection


class Phase(IntEnum):
    """Where an exchange is. An IntEnum so that hashing and ``is`` stay C-fast on
    the hot path; never compare phases by order."""

    PARSING = 0  # request head not complete yet
    READY = 1  # head complete; waiting for earlier pipelined requests, or to be routed
    WAITING = 2  # all replicas at max_ongoing_requests (or none yet): in the proxy's queue
    CONNECTING = 3  # a new connection to the chosen replica is being opened
    SENT = 4  # attached to an upstream connection: request sent, response awaited
    DONE = 5  # response complete, answered locally, or aborted


PARSING = Phase.PARSING
READY = Phase.READY
WAITING = Phase.WAITING
CONNECTING = Phase.CONNECTING
SENT = Phase.SENT
DONE = Phase.DONE

ALLOWED: Mapping[Phase, frozenset[Phase]] = {
    # The head is parsed; or the client left / broke the protocol mid-head.
    PARSING: frozenset({READY, DONE}),
    # Routed to a pooled connection, a new one, or the queue; or answered locally.
    READY: frozenset({SENT, CONNECTING, WAITING, DONE}),
    # A slot (or a first replica) became free; or the queue gave up on it.
    WAITING: frozenset({SENT, CONNECTING, DONE}),
    # Connected; or the connection failed and the request is retried elsewhere.
    CONNECTING: frozenset({SENT, READY, DONE}),
    # The response ended; or the attempt failed before any byte reached the client
    # and the request is idempotent: retried elsewhere.
    SENT: frozenset({DONE, READY}),
    DONE: frozenset(),
}

# Phases in which a replica has been chosen or asked (a slot, a queue place or a
# connection may be held): what must be undone when the request is abandoned.
ROUTED = frozenset({WAITING, CONNECTING, SENT})


class IllegalMove(RuntimeError):
    """A move that ``ALLOWED`` does not list: a bug in the proxy, never user input."""


def step(src: Phase, dst: Phase) -> Phase:
    """``dst`` if ``src -> dst`` is a legal move, else IllegalMove."""
    if dst not in ALLOWED[src]:
        raise IllegalMove(f"exchange cannot move from {src.name} to {dst.name}")
    return dst


class Exchange:
    """One request and its response as it moves through the proxy.

    Its ``state`` is written by the proxy only (``step``); the connections
    read it."""

    # Set only on a request the load balancer refused or answered itself, so a
    # request that reaches a replica pays nothing for them; read with getattr.
    reason: str  # why, one stable word for the access log (docs/observability.md)
    received: bytes  # ``METHOD TARGET`` as received, bounded, when ``head`` is empty

    __slots__ = (
        "attempts",
        "buffering",
        "client",
        "deadline",
        "first_byte",
        "fresh",
        "head",
        "held",
        "held_size",
        "http10",
        "idempotent",
        "keep_alive",
        "local",
        "method_head",
        "outcome",
        "passthrough_ok",
        "pending",
        "pending_size",
        "pin",
        "reason",
        "received",
        "replica",
        "request_done",
        "request_id",
        "response_started",
        "route_key",
        "served",
        "started",
        "state",
        "status",
        "tried",
        "upstream",
    )

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.state = PARSING
        self.head = b""  # the request head as sent upstream
        self.local: bytes | None = None  # a response the LB answers itself
        self.keep_alive = True
        self.http10 = False
        self.passthrough_ok = True  # may the replica's response bytes go out unchanged?
        self.idempotent = False
        self.method_head = False
        self.request_done = False
        self.request_id: bytes | None = None  # X-Request-Id, while the access log is on
        self.response_started = False
        self.pending: list[bytes] | None = None  # body received but not yet sent upstream
        self.pending_size = 0
        self.replica: ReplicaState | None = None  # holds one of its slots while set
        self.upstream: UpstreamConnection | None = None
        self.tried: set[int] | None = None
        self.attempts = 0
        # The body bytes sent upstream, kept for a retry (lb/retry.py) while they
        # total at most HOLD_BYTES; held_size -1: let go, the request is not retried.
        self.held: list[bytes] | None = None
        self.held_size = 0
        self.fresh = False  # sent again on a fresh connection (a retry after the keep-alive race)
        # Body still being read into ``pending``: not dispatched yet (request buffering).
        self.buffering = False
        self.deadline = 0.0  # perf_counter() by which the response must be complete; 0: none
        self.started = perf_counter()  # for the latency metrics
        self.first_byte = 0.0  # perf_counter() at the response body's first byte (TTFB)
        self.outcome = COMPLETED  # how it ended, for the access log (wire/counts.py)
        self.status = 0  # of the response the client got; 0: none reached it
        self.served: ReplicaState | None = None  # the replica that answered
        self.pin: int | None = None  # X-Steady-Version: only this version may answer
        # What a request-aware policy read from this request (its prompt's chain,
        # its affinity key); UNREAD until the first choice (lb/request_key.py).
        self.route_key: object = UNREAD


UNREAD = object()
"""An exchange's ``route_key`` before the policy's extractor ran on it."""


def cut_short(ex: Exchange, status: int, replica: ReplicaState, outcome: str) -> None:
    """A response broke off before its end: what the access log and the counts say
    of it (the replica that was answering, the status its head had sent)."""
    ex.outcome = outcome
    ex.served = replica
    ex.status = status


# Loop timers fire on millisecond ticks, against a loop clock that uvloop truncates
# to the millisecond: the one timer is armed this much after the earliest deadline,
# so it does not fire before it and re-arm itself for nothing.
CLOCK_SLACK = 0.001


class Deadlines:
    """The ``request_timeout_s`` deadlines of the exchanges in flight.

    Deadlines are ``perf_counter()`` times, the clock the latency is measured on,
    and pass only once that clock reaches them: a request is never cut a hair
    before its ``request_timeout_s`` (the loop's own clock is a millisecond coarse
    under uvloop, and timers fire on its ticks).

    One loop timer serves them all: a timer per request (``call_later`` then
    ``cancel``) costs about 1.9 us in uvloop, a third of the proxy's whole Python
    cost per request, where a dict insert and pop cost a tenth of that. The proxy
    keeps one timer armed for ``earliest()`` and, when it fires, times out what
    ``expired(now)`` returns. Scans are O(exchanges in flight), and happen about
    once per timeout period (once per expiry when requests do time out).
    """

    __slots__ = ("_at", "_due", "_timer")

    def __init__(self) -> None:
        self._due: dict[Exchange, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._at = 0.0  # when the armed timer fires

    def arm(self, loop: asyncio.AbstractEventLoop, due: float, fire: Callable[[], None]) -> None:
        """Have the one timer call ``fire`` just after ``due`` (it may already, or earlier)."""
        timer = self._timer
        if timer is not None:
            if self._at <= due:
                return  # the usual case: armed for an earlier request's deadline
            timer.cancel()  # request_timeout_s was lowered: this one is due first
        self._at = due
        self._timer = loop.call_later(due - perf_counter() + CLOCK_SLACK, fire)

    def fired(self) -> None:
        """The timer went off: the next ``arm`` sets a new one."""
        self._timer = None

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __len__(self) -> int:
        return len(self._due)

    def add(self, ex: Exchange, due: float) -> None:
        self._due[ex] = due

    def discard(self, ex: Exchange) -> None:
        """``ex`` ended (or no longer waits on its deadline): forget it."""
        ex.deadline = 0.0
        self._due.pop(ex, None)

    def expired(self, now: float) -> list[Exchange]:
        """Remove and return the exchanges due by ``now`` (``perf_counter()``), earliest first."""
        due = self._due
        out = sorted((ex for ex, at in due.items() if at <= now), key=due.__getitem__)
        for ex in out:
            del due[ex]
        return out

    def earliest(self) -> float | None:
        return min(self._due.values()) if self._due else None
