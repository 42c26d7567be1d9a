"""A replica's pooled keep-alive connections: which one a request may use again.

A replica closes a keep-alive connection that stays idle past its own timeout,
without a word (uvicorn, and so vLLM and SGLang: 5 s; gunicorn: 2 s;
llama.cpp's server: 5 s). A request sent on such a connection as the replica
closes it is lost in the keep-alive race. So a pooled connection is used again
only while

* it was idle for less than its replica's *hold*: 80% of the timeout the replica
  announces (``Keep-Alive: timeout=N``), else ``IDLE_HOLD`` (1.5 s, below every
  common server's timeout); and, once the replica was seen closing a pooled
  connection idle for some time, 80% of the shortest such time (never below
  ``MIN_HOLD``, so a replica that closes at random moments still gets its
  connections reused under load), and
* the kernel holds nothing to read for it: a pooled connection has nothing to
  say, so a readable one is at EOF, reset, or carries stray bytes. One ``poll``
  (a syscall of a quarter microsecond) sees a close that arrived since the event
  loop last looked.

What is left of the race (the replica closes between that check and the
request's arrival) is the retry rules' (lb/retry.py). Connections are taken
newest first, so the oldest age out (``expire``, from the proxy's sweep).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from steadyserve.lb.balancer import ReplicaState
    from steadyserve.lb.upstream import UpstreamConnection

IDLE_HOLD = 1.5  # seconds a connection is pooled when the replica announces no timeout
KEEP_ALIVE_SHARE = 0.8  # of an announced timeout: the margin covers the replica's clock slack
MAX_HOLD = 60.0  # however long a replica announces
MIN_HOLD = 0.05  # however early a replica was seen closing idle connections


def take(replica: ReplicaState, now: float) -> UpstreamConnection | None:
    """A pooled connection of ``replica`` that may carry a request now, newest first;
    the ones found too old or closed are closed and dropped."""
    idle = replica.idle
    hold = replica.idle_hold
    while idle:
        conn = idle.pop()
        conn.in_pool = False
        if conn.closed:
            continue
        age = now - conn.idle_since
        if age < hold:
            if conn.quiet():
                return conn
            closed_idle(replica, age)  # closed by the replica since the loop last looked
        conn.close()
    return None


def park(conn: UpstreamConnection, now: float) -> None:
    """Pool ``conn`` as idle from ``now``."""
    conn.in_pool = True
    conn.idle_since = now
    conn.replica.idle.append(conn)


def expire(replica: ReplicaState, now: float) -> None:
    """Close the pooled connections idle for the replica's hold or longer."""
    idle = replica.idle
    hold = replica.idle_hold
    while idle and now - idle[0].idle_since >= hold:
        conn = idle.pop(0)
        conn.in_pool = False
        conn.close()


def announced(replica: ReplicaState, value: bytes) -> None:
    """The replica sent ``Keep-Alive: value``: pool for less than its timeout."""
    hold = announced_hold(value)
    if hold is not None:
        replica.idle_hold = min(hold, replica.idle_cap)


def closed_idle(replica: ReplicaState, age: float) -> None:
    """The replica closed a pooled connection idle for ``age`` seconds: its idle
    timeout is at most that, so pool for less from now on."""
    cap = max(MIN_HOLD, min(replica.idle_cap, age * KEEP_ALIVE_SHARE))
    replica.idle_cap = cap
    replica.idle_hold = min(replica.idle_hold, cap)


def announced_hold(value: bytes) -> float | None:
    """How long to pool a connection whose replica sent ``Keep-Alive: value``
    (RFC 7230's ``timeout=N, max=M``); None when it names no valid timeout."""
    for param in value.split(b","):
        name, _, number = param.partition(b"=")
        if name.strip().lower() != b"timeout":
            continue
        try:
            seconds = float(number.strip().strip(b'"'))
        except ValueError:
            return None
        if not 0 <= seconds < float("inf"):
            return None
        return min(seconds * KEEP_ALIVE_SHARE, MAX_HOLD)
    return None
