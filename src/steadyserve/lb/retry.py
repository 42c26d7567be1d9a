"""When the load balancer sends a request again, and how many times it may.

RFC 9110 9.2.2 is the rule: a request may be sent again when its method is
idempotent (sending it twice has the effect of sending it once), or when the
load balancer can show that the replica never read it. A request whose replica
may have acted on it and whose method is not idempotent is never sent twice: it
fails honestly with 502. Nothing is ever retried once a byte of the response
reached the client. What an attempt's failure tells the proxy (lb/proxy.py,
every case before any response byte reached the client):

* ``unsent``: the write of the request failed: the replica read none of it. Any
  method may go again, on a fresh connection (the same replica may take it).
* ``reused`` and not ``answered``: a connection that had carried earlier requests
  reset or closed before any byte of this response. That is the keep-alive race
  (the replica closed the connection as idle just as the request went out): the
  replica is most likely fine. An idempotent request goes again once, on a fresh
  connection, the same replica allowed, and the replica is not counted as failing.
  Other methods cannot be told apart from a replica that read the request and
  died: 502.
* anything else (a fresh connection that broke, an answer that is not HTTP, a
  second failure): an idempotent request goes to another replica; others get 502.

A request body is sent again only from the bytes the load balancer still holds:
the whole body while it is at most ``HOLD_BYTES``; a larger streamed body is let
go as it is sent, and its request is then never retried.

``RetryBudget`` bounds the retries so that a failing replica never turns into a
retry storm (the retry budgets of Envoy and Finagle): retries may add
``RATIO`` of the requests answered, plus ``PER_SECOND`` so that a quiet service
can still retry, banked up to ``CAP``. Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from steadyserve.lb.exchange import Exchange
    from steadyserve.lb.upstream import UpstreamConnection

# Request body bytes held for a retry: a body up to this size is kept until its
# request is done (the same bound as the body held while no connection is ready).
HOLD_BYTES = 256 * 1024

# Methods that are idempotent (RFC 9110 9.2.2); a service adds its own with
# ``service.load_balancer.idempotent_methods``.
IDEMPOTENT_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})


def idempotent(marked: Iterable[str]) -> frozenset[bytes]:
    """The standard idempotent methods and those the service file marks."""
    return IDEMPOTENT_METHODS | {m.encode("ascii") for m in marked}


RATIO = 0.2  # retries may add a fifth to the requests answered
PER_SECOND = 10.0  # and ten a second, so a quiet service may still retry
CAP = 100.0  # retries banked at most: the largest burst of retries


class Retry(IntEnum):
    """What to do with a request whose attempt failed before any response byte."""

    NONE = 0  # answer 502
    FRESH = 1  # again on a new connection, any replica (the same one too)
    ELSEWHERE = 2  # again on another replica


def after_failure(
    *,
    unsent: bool,
    reused: bool,
    answered: bool,
    idempotent: bool,
    held: bool,
    fresh_tried: bool,
) -> Retry:
    """The move after a failed attempt (see the module's docstring).

    ``unsent``: the request's write failed; ``reused``: the connection carried
    earlier requests; ``answered``: a byte of the response arrived (not
    forwarded); ``idempotent``: the method may be sent twice; ``held``: the load
    balancer holds every body byte it sent; ``fresh_tried``: this request was
    already sent again on a fresh connection once."""
    if not held:
        return Retry.NONE
    if unsent:
        return Retry.FRESH
    if not idempotent:
        return Retry.NONE
    if reused and not answered and not fresh_tried:
        return Retry.FRESH
    return Retry.ELSEWHERE


def after_attempt(ex: Exchange, conn: UpstreamConnection) -> Retry:
    """``after_failure`` for ``ex``'s attempt on ``conn``, which failed before any
    response byte reached the client."""
    return after_failure(
        unsent=conn.unsent,
        reused=conn.idle_since > 0.0,  # it was pooled: it carried a request before
        answered=conn.answered,
        idempotent=ex.idempotent,
        held=ex.held_size >= 0,
        fresh_tried=ex.fresh,
    )


class RetryBudget:
    """How many retries the load balancer may make now (see the module's docstring)."""

    __slots__ = ("_answered", "_at", "cap", "per_second", "ratio", "tokens")

    def __init__(
        self, ratio: float = RATIO, per_second: float = PER_SECOND, cap: float = CAP
    ) -> None:
        self.ratio = ratio
        self.per_second = per_second
        self.cap = cap
        self.tokens = cap
        self._at: float | None = None
        self._answered = 0

    def spend(self, now: float, answered: int) -> bool:
        """Take one retry if the budget has one. ``answered``: the requests answered
        so far (a running total), ``now``: the loop's clock."""
        if self._at is not None:
            earned = self.ratio * max(0, answered - self._answered)
            earned += self.per_second * max(0.0, now - self._at)
            self.tokens = min(self.cap, self.tokens + earned)
        self._at = now
        self._answered = answered
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def hold(ex: Exchange, data: list[bytes], size: int) -> None:
    """``data`` (``size`` bytes of ``ex``'s body) went to the replica: keep it for a
    retry while the body held stays within HOLD_BYTES, else let the body go."""
    total = ex.held_size
    if total < 0:
        return
    total += size
    if total > HOLD_BYTES:
        ex.held = None
        ex.held_size = -1
        return
    if ex.held is None:
        ex.held = list(data)
    else:
        ex.held += data
    ex.held_size = total


def replay(ex: Exchange) -> None:
    """Before ``ex`` is sent again: the body bytes already sent go first."""
    held = ex.held
    if held:
        pending = ex.pending
        ex.pending = held + pending if pending else held
        ex.pending_size += ex.held_size
    ex.held = None
    ex.held_size = 0
