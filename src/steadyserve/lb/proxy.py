"""The data path's router: takes parsed requests (exchanges) to replicas and back.

Everything runs as plain callbacks on the event loop, with no task per request:
``ClientConnection`` (downstream.py) parses a request and calls ``Proxy.dispatch``; the
proxy picks a replica, takes one of its pooled keep-alive connections (or opens
one) and hands the request to that ``UpstreamConnection`` (upstream.py), which
streams the response back and calls ``response_complete``. A request costs one small
``Exchange`` and a few dozen Python calls: so the LB keeps most of a replica's throughput.

Failure rules (``_failed``): a connection not opened is retried on another replica
(ejected for a second); a request sent goes again only as lb/retry.py allows (RFC
9110 9.2.2), at most ``MAX_RETRIES`` times; else 502, or a closed client connection
once the response was under way (lb/pool.py: which connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

from steadyserve.lb import request_id, retry
from steadyserve.lb.balancer import Balancer, ReplicaState
from steadyserve.lb.client_guards import broken, connection_cap
from steadyserve.lb.exchange import (
    CONNECTING,
    DONE,
    READY,
    SENT,
    WAITING,
    Deadlines,
    cut_short,
    step,
)

# Exchange is re-exported: the connections and other modules' hooks import it from here.
from steadyserve.lb.exchange import Exchange as Exchange
from steadyserve.lb.http import no_route
from steadyserve.lb.metrics import LBMetrics
from steadyserve.lb.mirror import Mirroring, mirroring_for
from steadyserve.lb.pool import expire, park, take
from steadyserve.lb.request_key import route_key
from steadyserve.lb.retry import Retry
from steadyserve.lb.target import blocked_key
from steadyserve.lb.upstream import UpstreamConnection
from steadyserve.lb.websocket import switch
from steadyserve.wire.counts import CUT_BY_DRAIN, REPLICA_FAILED, TIMED_OUT
from steadyserve.wire.netns import create_connection
from steadyserve.wire.routes import Limits, RouteTable

if TYPE_CHECKING:
    from steadyserve.lb.downstream import ClientConnection
    from steadyserve.lb.websocket import WebSockets
    from steadyserve.lb.zero import ZeroHold

log = logging.getLogger("steadyserve.lb")

MAX_RETRIES = 3
CONNECT_TIMEOUT = 5.0
# Descriptors kept free for the listening socket, logs and the control plane.
FD_RESERVE = 64
# A client that reads none of its response for this long is disconnected, freeing
# the replica slot it holds through backpressure (nginx's send_timeout: 60 s).
SEND_TIMEOUT = 60.0


class Proxy:
    """Routes exchanges to replicas; owns the wait queue and the connection sets."""

    def __init__(
        self,
        service: str,
        balancer: Balancer,
        *,
        max_header_bytes: int = 65536,
        max_body_bytes: int = 100 * 1024 * 1024,
        connect_timeout: float = CONNECT_TIMEOUT,
        limits: Limits | None = None,
        fd_limit: int | None = None,
        send_timeout: float = SEND_TIMEOUT,
    ) -> None:
        self.service = service
        self.balancer = balancer
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.connect_timeout = connect_timeout
        self.send_timeout = send_timeout
        self.waiting: deque[Exchange] = deque()
        self.blocked_paths: frozenset[bytes] = frozenset()
        self.auth: bytes | None = None  # service.auth_key: a request must bear it
        self.clients: set[ClientConnection] = set()
        self.draining = False
        self._waking = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.metrics = LBMetrics()
        self.retry_budget = retry.RetryBudget()
        # Bound once: asyncio.get_running_loop() costs a getpid() syscall per call.
        self.loop = asyncio.get_running_loop()
        self.now = self.loop.time
        self.default_limits = limits or Limits()
        # Scale to zero (lb/zero.py): holds requests while the table lists no replica.
        self.zero: ZeroHold | None = None
        # WebSocket tunnels (lb/websocket.py); None declines upgrades (plain HTTP/1.1).
        self.websockets: WebSockets | None = None
        self.tunnels = 0  # open tunnels: they count towards max_connections
        self.limits = self.default_limits
        # Methods sent again after a failure (lb/retry.py), read by request_head.decide.
        self.idempotent_methods = retry.idempotent(self.limits.idempotent_methods)
        # request_timeout_s of the exchanges in flight, and the one timer serving them.
        self.deadlines = Deadlines()
        # Each client connection may hold one replica connection: two descriptors.
        self.fd_cap = max(1, (fd_limit - FD_RESERVE) // 2) if fd_limit else None
        self.max_connections = connection_cap(self.limits.max_connections, self.fd_cap)
        self.mirror: Mirroring | None = None  # a canary's shadow step (lb/mirror.py)

    # -- phases: the proxy alone writes Exchange.state, always through ``step``
    # (lb/exchange.py), which refuses a move its table does not list. -----------
    def ready(self, ex: Exchange) -> None:
        """The request head of ``ex`` is parsed (or ``ex`` is a local answer queued
        behind earlier pipelined requests): it may be routed once it is first."""
        ex.state = step(ex.state, READY)
        if self.metrics.access_log is not None and ex.head:  # X-Request-Id (lb/request_id.py)
            request_id.tag(ex)

    def answered_locally(self, ex: Exchange) -> None:
        """The client connection wrote a response of the load balancer's own."""
        ex.state = step(ex.state, DONE)

    def enqueue(self, ex: Exchange) -> None:
        """Queue ``ex`` until a replica slot (or, at zero, a first replica) frees up."""
        ex.state = step(ex.state, WAITING)
        self.waiting.append(ex)

    # -- table -----------------------------------------------------------------
    def apply_table(self, table: RouteTable) -> None:
        """Switch routes; queued requests may now fit (or have nowhere left to go)."""
        self.balancer.apply(table)
        self.blocked_paths = frozenset(blocked_key(path) for path in table.blocked_paths)
        limits = table.limits or self.default_limits
        if limits != self.limits:
            self.limits = limits
            self.max_connections = connection_cap(limits.max_connections, self.fd_cap)
            self.idempotent_methods = retry.idempotent(limits.idempotent_methods)
            log.info("limits: %s", limits)
        if self.zero is not None:
            self.zero.on_table()
        self.mirror = mirroring_for(self, table.mirror, self.mirror)
        listed = ", ".join(f"{r.id}@{r.host}:{r.port}" for r in table.replicas)
        log.info("routes %s: %s", table.key, listed or "(none)")
        self._wake()

    # -- routing ---------------------------------------------------------------
    def dispatch(self, ex: Exchange) -> None:
        """Send ``ex`` to a replica, queue it, or answer it with an error."""
        balancer = self.balancer
        try:  # free unless raised: a failure closes this client, never hangs it
            if balancer.read_key is None:
                replica = balancer.choose(ex.tried, ex.pin)
            else:
                replica = balancer.choose(ex.tried, ex.pin, route_key(ex, balancer.read_key))
            if replica is not None:
                self._start_attempt(ex, replica)
                return
        except Exception as exc:
            broken(ex.client, exc)
            return
        if balancer.has_candidate(ex.tried, ex.pin):
            limit = balancer.max_queued
            if ex.client.upgrading is ex:
                # A WebSocket holds its slot for its life: waiting for one could be forever.
                self._respond(ex, 503, "no replica can take a WebSocket now", "websocket_full")
            elif limit < 0 or len(self.waiting) < limit:
                self.enqueue(ex)
            else:
                msg = f"service {self.service!r} is at capacity, queue full"
                self._respond(ex, 503, msg, "queue_full")
            return
        if self.zero is not None and self.zero.hold(ex):
            return
        self._no_route(ex)

    def _no_route(self, ex: Exchange) -> None:
        if ex.attempts:  # tried, and no replica is left to try
            return self.answer_failed(ex, f"no replica of service {self.service!r} answered")
        self._respond(ex, *no_route(self.service, ex.pin, bool(self.balancer.replicas)))

    def _wake(self) -> None:
        """Start queued requests, first come first served, while slots are free."""
        if self._waking:
            return
        self._waking = True
        try:
            waiting = self.waiting
            balancer = self.balancer
            while waiting:
                ex = waiting[0]
                try:  # as in dispatch: a failure closes this client, the queue goes on
                    if balancer.read_key is None:
                        replica = balancer.choose(ex.tried, ex.pin)
                    else:
                        key = route_key(ex, balancer.read_key)
                        replica = balancer.choose(ex.tried, ex.pin, key)
                    if replica is None:
                        zero = self.zero
                        if balancer.has_candidate(ex.tried, ex.pin) or (zero and zero.keep()):
                            break
                        waiting.popleft()
                        self._no_route(ex)
                        continue
                    waiting.popleft()
                    self._start_attempt(ex, replica)
                except Exception as exc:
                    if waiting and waiting[0] is ex:
                        waiting.popleft()
                    broken(ex.client, exc)
        finally:
            self._waking = False

    def _start_attempt(self, ex: Exchange, replica: ReplicaState) -> None:
        ex.replica = replica
        ex.attempts += 1
        if ex.attempts > 1:
            self.metrics.retries += 1  # sent again (lb/retry.py); the access log's retries
        replica.requests += 1
        idle = replica.idle
        if idle and not ex.fresh:
            # pool.take's common case inline: the call would cost more, on every request.
            conn = idle[-1]
            poller = conn.poller
            fit = not conn.closed and self.now() - conn.idle_since < replica.idle_hold
            if fit and (poller is None or not poller.poll(0)):
                idle.pop()
                self._attach(ex, conn)
                return
            pooled = take(replica, self.now())
            if pooled is not None:
                self._attach(ex, pooled)
                return
        ex.state = step(ex.state, CONNECTING)
        task = self.loop.create_task(self._connect(ex, replica))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, ex: Exchange, replica: ReplicaState) -> None:
        try:
            _, conn = await asyncio.wait_for(
                create_connection(
                    self.loop,
                    partial(UpstreamConnection, self, replica),
                    replica.host,
                    replica.port,
                    replica.netns,
                ),
                self.connect_timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            self.metrics.connect_failures += 1
            what = "replica %d (%s:%d) refused a connection: %r; ejected for %.1fs"
            eject = self.balancer.eject_seconds
            log.warning(what, replica.id, replica.host, replica.port, exc, eject)
            self.balancer.eject(replica)
            if ex.replica is replica and ex.state is CONNECTING:
                self._failed(ex, replica, Retry.ELSEWHERE)
            return
        if ex.replica is replica and ex.state is CONNECTING:
            self._attach(ex, conn)
        else:
            self._park(conn)

    def _attach(self, ex: Exchange, conn: UpstreamConnection) -> None:
        ex.state = step(ex.state, SENT)
        ex.upstream = conn
        timeout = self.limits.request_timeout_s
        if timeout is not None:
            due = ex.deadline = perf_counter() + timeout
            self.deadlines.add(ex, due)
            self.deadlines.arm(self.loop, due, self._deadlines_due)
        pending = ex.pending
        if pending:
            ex.pending = None
            size = ex.pending_size
            ex.pending_size = 0
            conn.start(ex, ex.head, pending)
            retry.hold(ex, pending, size)  # for a retry (lb/retry.py)
            ex.client.body_flushed()
        else:
            conn.start(ex, ex.head, None)
        if conn.unsent:  # closed under us (a new connection the replica dropped at once)
            self.upstream_failed(ex, conn, "the request could not be written")

    def _park(self, conn: UpstreamConnection) -> None:
        """Pool a connection that has nothing to do, if its replica is still routable."""
        if conn.closed or not conn.replica.in_table or self.draining:
            conn.close()
            return
        park(conn, self.now())

    def _release(self, replica: ReplicaState) -> None:
        self.balancer.release(replica)
        if self.waiting:
            self._wake()

    give_back = _release  # a slot a mirrored copy held (lb/mirror.py) is free again

    # -- request_timeout_s: one timer for every exchange in flight (Deadlines) -----
    def _deadlines_due(self) -> None:
        deadlines = self.deadlines
        deadlines.fired()
        for ex in deadlines.expired(perf_counter()):
            ex.deadline = 0.0
            self._timed_out(ex)
        earliest = deadlines.earliest()
        if earliest is not None:
            deadlines.arm(self.loop, earliest, self._deadlines_due)

    # -- outcomes (called by the connections) -------------------------------------
    def _timed_out(self, ex: Exchange) -> None:
        """``request_timeout_s`` passed: answer_late, or close a client already answering."""
        replica = ex.replica
        conn = ex.upstream
        if conn is None or ex.state is not SENT or replica is None:
            return
        what = "replica %d: no complete response within request_timeout_s %.1fs"
        log.warning(what, replica.id, self.limits.request_timeout_s)
        ex.upstream = ex.replica = None
        ex.served = replica  # the client's 504 counts against the replica's version
        conn.close()
        replica.errors += 1
        if conn.wrote:
            ex.state = step(ex.state, DONE)
            cut_short(ex, conn.status, replica, TIMED_OUT)
            self._release(replica)
            ex.client.abort_response(ex)
            return
        self.answer_late(ex)
        self._release(replica)

    def answer_late(self, ex: Exchange) -> None:
        """504: ``request_timeout_s`` passed before a byte of the response (a gateway lane: 408)."""
        late = f"service {self.service!r} did not answer in time"
        self._respond(ex, 504, late, "request_timeout")

    def response_complete(self, ex: Exchange, conn: UpstreamConnection, reusable: bool) -> None:
        """The replica finished its response: pool the connection, free the slot."""
        if ex.deadline:
            self.deadlines.discard(ex)
        replica = ex.replica
        ex.replica = None
        ex.upstream = None
        ex.state = step(ex.state, DONE)
        ex.status = conn.status
        ex.served = replica
        if reusable and ex.request_done and conn.replica.in_table and not self.draining:
            conn.in_pool = True  # pool.park, inline: on every request
            conn.idle_since = self.now()
            conn.replica.idle.append(conn)
        else:
            conn.close()
        if replica is not None:
            if conn.status >= 500:
                replica.errors += 1
            self._release(replica)
        if self.mirror is not None:  # before the client moves on: conn.seen is its answer's
            self.mirror.offer(ex, conn)
        ex.client.response_done(ex)

    def upstream_failed(self, ex: Exchange, conn: UpstreamConnection, reason: str) -> None:
        """The replica connection broke (or spoke nonsense) before the response ended."""
        conn.close()
        replica = ex.replica
        if ex.upstream is not conn or replica is None:
            return
        ex.upstream = None
        if ex.deadline:
            self.deadlines.discard(ex)
        log.warning("replica %d: %s", replica.id, reason)
        if conn.wrote:
            replica.errors += 1
            ex.replica = None
            ex.state = step(ex.state, DONE)
            # Out of the table (or the LB stops): a drain's bound cut it, not a fault.
            gone = not replica.in_table or self.draining
            cut_short(ex, conn.status, replica, CUT_BY_DRAIN if gone else REPLICA_FAILED)
            self._release(replica)
            ex.client.abort_response(ex)
            return
        ex.response_started = False  # nothing reached the client: a clean 502 is possible
        self._failed(ex, replica, retry.after_attempt(ex, conn))

    def _failed(self, ex: Exchange, replica: ReplicaState, move: Retry) -> None:
        """An attempt failed before any response byte reached the client: send it
        again as ``move`` says (lb/retry.py), budget allowing; else 502."""
        if move is not Retry.FRESH:
            replica.errors += 1  # a FRESH retry is the keep-alive race, not the replica
        ex.replica = None
        ex.served = replica  # should the client get 502, it counts against this version
        if (
            move is not Retry.NONE
            and ex.attempts <= MAX_RETRIES
            and not ex.client.closing
            and self.retry_budget.spend(self.now(), self.metrics.answered())
        ):
            if move is Retry.FRESH:
                ex.fresh = True
            else:
                ex.tried = {*(ex.tried or ()), replica.id}
            retry.replay(ex)
            ex.state = step(ex.state, READY)
            self.dispatch(ex)
        else:
            self.answer_failed(ex, f"replica of service {self.service!r} failed")
        self._release(replica)

    def answer_failed(self, ex: Exchange, message: str) -> None:
        """502: replicas failed before a byte of the response (a gateway lane: Ray's 500)."""
        self._respond(ex, 502, message, "replica_failed")

    def abort(self, ex: Exchange) -> None:
        """Forget ``ex`` (its client left or broke the protocol); keep the counts right."""
        state = ex.state
        if state is DONE:
            return  # answered already: nothing is held
        if state is WAITING:
            with contextlib.suppress(ValueError):
                self.waiting.remove(ex)
        ex.state = step(ex.state, DONE)
        if ex.deadline:
            self.deadlines.discard(ex)
        conn = ex.upstream
        if conn is not None:
            ex.upstream = None
            ex.status = conn.status if conn.wrote else 0
            conn.close()
        replica = ex.replica
        if replica is not None:
            ex.replica = None
            if state is SENT:
                ex.served = replica
            self._release(replica)

    def switched(
        self, ex: Exchange, transport: asyncio.Transport, head: bytes, rest: bytes
    ) -> None:
        """The replica answered ``ex``'s WebSocket handshake with 101: the tunnel takes its slot."""
        if ex.deadline:
            self.deadlines.discard(ex)
        ex.state = step(ex.state, DONE)
        ex.status, ex.served, ex.replica, ex.upstream = 101, ex.replica, None, None
        ex.response_started = True
        switch(ex.client, ex, transport, head, rest)

    def _respond(
        self, ex: Exchange, status: int, message: str, reason: str, data: bytes = b""
    ) -> None:
        """Answer ``ex`` with an error ``message`` (or ``data``); ``reason``: for the log."""
        ex.reason = reason
        ex.state = step(ex.state, DONE)
        ex.response_started = True
        if data:
            ex.client.respond_with(ex, status, data)
        else:
            ex.client.respond_local(ex, status, message)

    # -- lifecycle ---------------------------------------------------------------
    def begin_drain(self) -> None:
        """Stop keeping connections alive; in-flight and queued requests still finish."""
        self.draining = True
        for client in list(self.clients):
            if not client.exchanges:
                client.close()

    def sweep(self) -> None:
        """Close idle client connections and pooled replica connections gone cold."""
        now = self.now()
        idle_timeout = self.limits.idle_timeout_s
        for client in list(self.clients):
            if not client.exchanges and now - client.idle_since > idle_timeout:
                client.close()
        for replica in list(self.balancer.known.values()):
            expire(replica, now)

    def close_all(self) -> None:
        """The load balancer stops: what is still in flight was cut by its drain."""
        for client in list(self.clients):
            for ex in client.exchanges:
                if ex.state is not DONE:
                    ex.outcome = CUT_BY_DRAIN
            client.close()
        for replica in list(self.balancer.known.values()):
            replica.close_idle()
        for task in list(self._tasks):
            task.cancel()
        self.deadlines.cancel()
        if self.zero is not None:
            self.zero.close()
        self.mirror = mirroring_for(self, None, self.mirror)  # its copies are cancelled
