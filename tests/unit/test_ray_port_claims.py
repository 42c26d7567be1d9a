"""Ports for replicas on a Ray node: the actors of one node never share one.

Each actor is its own process, so the controller's in-memory reservations
(backends/ports.py) cannot help there; claim files on the node do
(backends/ray_actor.py). Several calls in this process stand for several actors:
a claim held by a live process, this one included, is never handed out again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from steadyserve.backends import ray_actor
from steadyserve.backends.ray_actor import claim_ports, release_ports

HOST = "127.0.0.1"


def test_claimed_ports_are_distinct_and_claimed(tmp_path: Path) -> None:
    taken = [p for _ in range(300) for p in claim_ports(HOST, 2, tmp_path)]
    assert len(set(taken)) == len(taken) == 600
    assert len(list(tmp_path.iterdir())) == 600


def test_a_live_claim_is_skipped_and_a_stale_one_taken_over(tmp_path: Path) -> None:
    (port,) = claim_ports(HOST, 1, tmp_path)
    claim = tmp_path / f"{HOST}-{port}"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    claim.write_text(dead.stdout.strip())  # its actor has exited
    assert ray_actor._claim(claim)
    assert claim.read_text() == str(os.getpid())
    assert not ray_actor._claim(claim)  # now held by a live process


def test_release_drops_only_this_actors_claims(tmp_path: Path) -> None:
    mine = claim_ports(HOST, 2, tmp_path)
    other = tmp_path / f"{HOST}-1"
    other.write_text("1")  # pid 1 lives: another actor's claim
    release_ports(HOST, [*mine, 1], tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [f"{HOST}-1"]


def test_no_free_port_is_an_error_and_leaves_no_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More ports than one search tries: an error, and the ports it had claimed
    go back."""
    monkeypatch.setattr(ray_actor, "MAX_PORT_TRIES", 3)
    with pytest.raises(OSError, match=f"no free port on {HOST} after 3 tries"):
        claim_ports(HOST, 4, tmp_path)
    assert list(tmp_path.iterdir()) == []
