"""When a request is sent again (lb/retry.py) and which pooled connection may carry
one (lb/pool.py): the pure rules, then the proxy's real objects without sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import pytest
from _sockless import Rig
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.lb.balancer import ReplicaState
from steadyserve.lb.exchange import CONNECTING, Exchange
from steadyserve.lb.pool import (
    IDLE_HOLD,
    MIN_HOLD,
    announced,
    announced_hold,
    closed_idle,
    expire,
    take,
)
from steadyserve.lb.retry import (
    HOLD_BYTES,
    Retry,
    RetryBudget,
    after_failure,
    hold,
    replay,
)
from steadyserve.wire.routes import ReplicaRoute

FLAGS = ("unsent", "reused", "answered", "idempotent", "held", "fresh_tried")


def move(**kw: bool) -> Retry:
    args = dict.fromkeys(FLAGS, False)
    args.update(kw)
    return after_failure(**args)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        # The keep-alive race: a reused connection closed before any response byte.
        ({"reused": True, "idempotent": True, "held": True}, Retry.FRESH),
        ({"reused": True, "held": True}, Retry.NONE),  # a POST the replica may have read
        # Once only: the fresh attempt failing too is the replica's fault.
        ({"reused": True, "idempotent": True, "held": True, "fresh_tried": True}, Retry.ELSEWHERE),
        # A byte of the answer arrived (garbage, a partial head): the replica read it.
        ({"reused": True, "answered": True, "idempotent": True, "held": True}, Retry.ELSEWHERE),
        ({"reused": True, "answered": True, "held": True}, Retry.NONE),
        ({"idempotent": True, "held": True}, Retry.ELSEWHERE),  # a fresh connection broke
        ({"held": True}, Retry.NONE),
        # The write failed: the replica read nothing, whatever the method.
        ({"unsent": True, "held": True}, Retry.FRESH),
        ({"unsent": True, "reused": True, "held": True}, Retry.FRESH),
        # The body was let go: nothing to send again.
        ({"unsent": True, "idempotent": True}, Retry.NONE),
        ({"reused": True, "idempotent": True}, Retry.NONE),
    ],
)
def test_after_failure_follows_rfc_9110(kw: dict[str, bool], expected: Retry) -> None:
    assert move(**kw) is expected


@given(st.fixed_dictionaries({flag: st.booleans() for flag in FLAGS}))
def test_a_request_the_replica_may_have_read_is_sent_again_only_if_idempotent(
    kw: dict[str, bool],
) -> None:
    got = after_failure(**kw)
    if not kw["held"]:
        assert got is Retry.NONE  # never without every body byte
    if not kw["idempotent"] and not kw["unsent"]:
        assert got is Retry.NONE
    if got is Retry.FRESH and not kw["unsent"]:
        # Only the keep-alive race earns a second try on the same replica, once.
        assert kw["reused"] and not kw["answered"] and not kw["fresh_tried"]


def test_the_budget_bounds_retries_for_a_replica_that_fails_everything() -> None:
    """1000 requests a second, every one failing: retries stay near a fifth of the
    answered requests plus ten a second (and the banked 100), not one each."""
    budget = RetryBudget()
    granted = 0
    for i in range(10_000):  # 10 s of simulated time
        granted += budget.spend(i / 1000, answered=i)
    assert granted <= 100 + 0.2 * 10_000 + 10 * 10
    assert granted >= 0.2 * 10_000  # a fifth of the traffic may always be retried


def test_the_budget_refills_on_a_quiet_service() -> None:
    budget = RetryBudget(cap=2)
    assert budget.spend(0.0, 0) and budget.spend(0.0, 0)
    assert not budget.spend(0.0, 0)
    assert budget.spend(0.1, 0)  # ten a second: one in 0.1 s


def _exchange() -> Exchange:
    return Exchange(cast(Any, None))


def test_a_body_is_held_up_to_hold_bytes_then_let_go() -> None:
    ex = _exchange()
    hold(ex, [b"a" * 1000, b"b" * 1000], 2000)
    hold(ex, [b"c"], 1)
    assert ex.held == [b"a" * 1000, b"b" * 1000, b"c"] and ex.held_size == 2001
    ex.pending = [b"d"]
    ex.pending_size = 1
    replay(ex)
    assert ex.pending == [b"a" * 1000, b"b" * 1000, b"c", b"d"] and ex.pending_size == 2002
    assert ex.held is None and ex.held_size == 0
    hold(ex, [b"x" * HOLD_BYTES], HOLD_BYTES)
    hold(ex, [b"y"], 1)
    assert ex.held is None and ex.held_size == -1  # let go: never retried
    hold(ex, [b"z"], 1)
    assert ex.held_size == -1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"timeout=5", 4.0),
        (b"timeout=5, max=100", 4.0),
        (b"max=100, Timeout = 2", 1.6),
        (b'timeout="1"', 0.8),
        (b"timeout=0", 0.0),
        (b"timeout=100000", 60.0),
        (b"timeout=-1", None),
        (b"timeout=nan", None),
        (b"timeout=inf", None),
        (b"timeout=x", None),
        (b"max=3", None),
        (b"", None),
    ],
)
def test_a_keep_alive_header_sets_the_hold(value: bytes, expected: float | None) -> None:
    if expected is None:
        assert announced_hold(value) is None
    else:
        assert announced_hold(value) == pytest.approx(expected)


class FakeConn:
    def __init__(self, replica: ReplicaState, idle_since: float, quiet: bool = True) -> None:
        self.replica = replica
        self.idle_since = idle_since
        self.in_pool = True
        self.closed = False
        self._quiet = quiet

    def quiet(self) -> bool:
        return self._quiet

    def close(self) -> None:
        self.closed = True


def _replica() -> ReplicaState:
    return ReplicaState(ReplicaRoute(id=1, version=1, host="127.0.0.1", port=9))


def test_take_skips_closed_old_and_readable_connections_newest_first() -> None:
    replica = _replica()
    old = FakeConn(replica, 0.0)
    readable = FakeConn(replica, 9.0, quiet=False)
    good = FakeConn(replica, 9.5)
    newest_closed = FakeConn(replica, 9.9)
    newest_closed.closed = True
    replica.idle = cast(Any, [old, good, readable, newest_closed])
    assert take(replica, 10.0) is good
    assert readable.closed and not good.closed
    # The readable one was closed by the replica after at most 1 s idle: learned.
    assert replica.idle_hold == pytest.approx(0.8)
    assert take(replica, 10.0) is None and old.closed  # idle 10 s: past the hold
    assert replica.idle == []


def test_expire_closes_connections_idle_for_the_hold() -> None:
    replica = _replica()
    conns = [FakeConn(replica, t) for t in (0.0, 1.0, 2.0)]
    replica.idle = cast(Any, list(conns))
    expire(replica, IDLE_HOLD + 0.5)  # idle 2.0, 1.0 and 0.0 s
    assert [c.closed for c in conns] == [True, False, False]


def test_holds_learned_from_the_header_and_from_closes_only_shorten_past_a_close() -> None:
    replica = _replica()
    announced(replica, b"timeout=30")
    assert replica.idle_hold == pytest.approx(24.0)  # a replica may ask for longer
    closed_idle(replica, 0.1)
    assert replica.idle_hold == pytest.approx(0.08)
    announced(replica, b"timeout=30")
    assert replica.idle_hold == pytest.approx(0.08)  # seen closing sooner than it says
    closed_idle(replica, 0.001)
    assert replica.idle_hold == MIN_HOLD  # random closes never end pooling


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


POST = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody"


def test_a_post_whose_write_failed_is_sent_again_with_its_body(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = Rig(loop)
    try:
        transport = rig.upstream_transport
        transport.write = transport.writelines = lambda data: transport.close()  # type: ignore[method-assign,assignment]
        rig.client.data_received(POST)
        ex = rig.client.exchanges[0]
        assert rig.upstream.unsent
        rig.upstream.connection_lost(BrokenPipeError())
        assert ex.state is CONNECTING and ex.fresh  # a new connection, same replica allowed
        assert ex.pending == [b"body"] and rig.proxy.metrics.retries == 1
        assert not rig.client_transport.bytes()  # no 502
    finally:
        rig.close()
        for task in list(rig.proxy._tasks):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))


@pytest.mark.parametrize(("method", "retried"), [(b"PUT", True), (b"POST", False)])
def test_a_reused_connection_closed_before_any_answer(
    loop: asyncio.AbstractEventLoop, method: bytes, retried: bool
) -> None:
    """The keep-alive race: an idempotent request goes again on a fresh connection;
    a POST the replica may have read gets 502, counted against its replica."""
    rig = Rig(loop)
    try:
        rig.upstream.idle_since = rig.proxy.now()  # pooled: it carried a request before
        rig.client.data_received(POST.replace(b"POST", method))
        ex = rig.client.exchanges[0]
        rig.upstream.connection_lost(None)
        if retried:
            assert ex.state is CONNECTING and ex.fresh and ex.pending == [b"body"]
            assert rig.proxy.balancer.replicas[0].errors == 0  # the race, not the replica
        else:
            assert rig.client_transport.bytes().startswith(b"HTTP/1.1 502")
            assert [r.served for r in rig.records] == [rig.proxy.balancer.replicas[0]]
        assert rig.proxy.metrics.retries == int(retried)
    finally:
        rig.close()
        for task in list(rig.proxy._tasks):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))


@pytest.mark.parametrize("raises", [False, True])
def test_a_connection_closed_under_the_request_sends_it_again_not_hangs(
    loop: asyncio.AbstractEventLoop, raises: bool
) -> None:
    """The replica closed the connection before the load balancer wrote a byte
    (a new connection it dropped at once; the close seen by the transport, not yet
    by the protocol): the request, a POST too, goes again on a fresh connection.
    uvloop raises on a write to a closed handle; asyncio drops the bytes."""
    rig = Rig(loop)
    try:
        transport = rig.upstream_transport
        transport.closed = True
        if raises:

            def closed_handle(data: object) -> None:
                raise RuntimeError("unable to perform operation: the handler is closed")

            transport.write = transport.writelines = closed_handle  # type: ignore[method-assign,assignment]
        rig.client.data_received(POST)
        ex = rig.client.exchanges[0]
        assert ex.state is CONNECTING and ex.fresh and ex.pending == [b"body"]
        assert not rig.client_transport.bytes()
    finally:
        rig.close()
        for task in list(rig.proxy._tasks):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))


def test_only_a_close_by_the_replica_teaches_the_pool(loop: asyncio.AbstractEventLoop) -> None:
    """A pooled connection the load balancer closes itself (the replica left the
    table) says nothing of the replica's idle timeout; one the replica closes does."""
    rig = Rig(loop)
    try:
        replica = rig.proxy.balancer.replicas[0]
        replica.close_idle()
        rig.upstream.connection_lost(None)
        assert replica.idle_hold == IDLE_HOLD
        other = Rig(loop)
        replica = other.proxy.balancer.replicas[0]
        other.upstream.idle_since = other.proxy.now() - 0.5
        other.upstream.connection_lost(None)  # the replica closed it, idle 0.5 s
        assert replica.idle_hold == pytest.approx(0.4, abs=0.01)
        assert replica.idle == []
        other.close()
    finally:
        rig.close()
