"""A failure in the load balancer's own handling of a request (a bug, or an input
no check foresaw) closes and counts that connection: it never hangs, holding its
socket and its slot for good. The failure is injected into the real proxy's
replica choice, where a request-aware policy's key reading once raised."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from _sockless import RecordingTransport, Rig

from steadyserve.lb.balancer import ReplicaState
from steadyserve.lb.downstream import ClientConnection

GET = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"


class Boom(RuntimeError):
    pass


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def fail_choice(rig: Rig, after: int = 0) -> None:
    """The balancer's choice raises after ``after`` good choices."""
    real = rig.proxy.balancer.choose
    calls = [0]

    def choose(*args: object) -> ReplicaState | None:
        calls[0] += 1
        if calls[0] > after:
            raise Boom("injected")
        return real(*args)  # type: ignore[arg-type]

    rig.proxy.balancer.choose = choose  # type: ignore[method-assign]


def test_a_failing_choice_answers_500_counts_it_and_closes(loop: asyncio.AbstractEventLoop) -> None:
    rig = Rig(loop)
    fail_choice(rig)
    rig.client.data_received(GET)
    out = rig.client_transport.bytes()
    assert out.startswith(b"HTTP/1.1 500 "), out
    assert rig.client_transport.closed
    assert [(ex.status, ex.reason) for ex in rig.records] == [(500, "internal_error")]
    assert not rig.proxy.clients  # no longer counts towards max_connections
    assert all(r.inflight == 0 for r in rig.proxy.balancer.replicas)  # no slot held


def test_a_failure_routing_a_pipelined_request_closes_the_connection(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = Rig(loop)
    fail_choice(rig, after=1)  # the first request is routed, the second one breaks
    rig.client.data_received(GET + GET)
    rig.upstream.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    out = rig.client_transport.bytes()
    assert out.startswith(b"HTTP/1.1 200 OK"), out
    assert rig.client_transport.closed
    assert not rig.proxy.clients
    assert all(r.inflight == 0 for r in rig.proxy.balancer.replicas)


def test_a_failure_starting_a_queued_request_closes_its_connection(
    loop: asyncio.AbstractEventLoop,
) -> None:
    rig = Rig(loop)
    rig.proxy.balancer.max_ongoing = 1
    rig.client.data_received(GET)  # takes the only slot
    transport = RecordingTransport()
    queued = ClientConnection(rig.proxy)
    queued.connection_made(transport)  # type: ignore[arg-type]
    queued.data_received(GET)
    assert list(rig.proxy.waiting)  # waits for the slot
    fail_choice(rig)
    rig.upstream.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    # The slot freed: the queued request was started, and broke.
    assert not rig.proxy.waiting
    assert transport.bytes().startswith(b"HTTP/1.1 500 "), transport.bytes()
    assert transport.closed
    assert rig.client_transport.bytes().startswith(b"HTTP/1.1 200 OK")
