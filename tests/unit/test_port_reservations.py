"""Local replicas' ports: the OS's free ports, never one handed out twice.

Asking the OS for a free port a few thousand times (bind to port 0, close) hands
some ports out twice within seconds: the birthday bound over its ~14,000 odd
ports. Two replicas given the same port, one dies with "address already in use"
before it was ready, and its version is judged broken (a CI failure showed it).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from steadyserve.backends.ports import (
    HOLD_S,
    MAX_TRIES,
    REPLICA_PORTS,
    PortReservations,
    PortsExhausted,
    candidate_ports,
    ephemeral_range,
)

TAKES = 2000


def test_no_port_is_handed_out_twice() -> None:
    reservations = PortReservations()
    ports = [p for _ in range(TAKES // 2) for p in reservations.take(2)]
    assert len(set(ports)) == len(ports) == TAKES
    assert all(p in reservations for p in ports)


def test_a_replicas_ports_differ_and_are_free() -> None:
    reservations = PortReservations()
    for _ in range(50):
        port, control = reservations.take(2)
        assert port != control
        for p in (port, control):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", p))  # nobody holds it: the replica can bind it


def test_a_bound_port_is_never_handed_out() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        reservations = PortReservations()
        assert all(taken not in reservations.take(1) for _ in range(500))


def test_release_and_expiry_forget_a_port() -> None:
    now = [0.0]
    reservations = PortReservations(clock=lambda: now[0])
    (first,) = reservations.take(1)
    (second,) = reservations.take(1)
    reservations.release(first)
    reservations.release(None)  # a replica without a control port
    assert first not in reservations and second in reservations
    now[0] = HOLD_S - 1
    reservations.take(1)
    assert second in reservations
    now[0] = HOLD_S + 1
    reservations.take(1)
    assert second not in reservations


def test_running_out_is_an_error_not_a_loop() -> None:
    """More ports than one search may try: a bounded search, then a one-line error."""
    with pytest.raises(PortsExhausted, match=f"no free port on 127.0.0.1 after {MAX_TRIES} tries"):
        PortReservations().take(MAX_TRIES + 1)


def test_ports_lie_outside_the_ephemeral_range() -> None:
    """Outgoing connections take their local ports from the ephemeral range: one
    taking a replica's port before the replica binds it fails the replica."""
    ephemeral = ephemeral_range()
    assert ephemeral is not None  # Linux: the tests run there
    reservations = PortReservations()
    ports = [p for _ in range(300) for p in reservations.take(2)]
    assert all(p in REPLICA_PORTS and p not in ephemeral for p in ports)


def test_an_outgoing_connections_port_is_passed_over() -> None:
    """A candidate port some connection holds is skipped, not handed out."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.socket() as client:
            reservations = PortReservations(
                ports=range(REPLICA_PORTS.start, REPLICA_PORTS.start + 8)
            )
            held = reservations.candidates[reservations._cursor]
            client.bind(("127.0.0.1", held))
            client.connect(server.getsockname())
            for _ in range(20):
                (port,) = reservations.take(1)
                assert port != held
                reservations.release(port)


def test_the_os_chooses_when_the_range_is_all_ephemeral() -> None:
    reservations = PortReservations(ports=range(40000, 40010), ephemeral=range(32768, 61000))
    assert reservations.candidates == []
    ports = reservations.take(2)
    assert len(set(ports)) == 2


def test_candidates_read_the_kernels_range(tmp_path: Path) -> None:
    file = tmp_path / "range"
    file.write_text("25000\t60999\n")
    assert ephemeral_range(file) == range(25000, 61000)
    assert candidate_ports(range(20000, 30000), ephemeral_range(file)) == list(range(20000, 25000))
    file.write_text("garbage")
    assert ephemeral_range(file) is None
    assert ephemeral_range(tmp_path / "absent") is None
