"""A driver script that follows one home, then another (Ray's tests do, one
controller per test file): its handles use the home it follows now, secret and all.
The second home's replicas pickle answers with their own graph secret, so a driver
keeping the first home's could read none of them (a full-suite run showed it:
``ReplicaID is not JSON-serialisable and pickle needs the graph secret``)."""

from __future__ import annotations

from pathlib import Path

from steadyserve.home.paths import Home
from steadyserve.serve import handle


def test_connecting_to_another_home_takes_its_graph_secret(tmp_path: Path) -> None:
    saved = (handle._graph_secret, handle._driver_home, handle._driver_token)
    try:
        first, second = Home(tmp_path / "a"), Home(tmp_path / "b")
        handle.connect_driver(first, "routes-a", "secret-a")
        assert (handle._driver_home, handle._graph_secret) == (first, "secret-a")
        handle.connect_driver(second, "routes-b", "secret-b")
        assert handle._driver_home == second
        assert (handle._driver_token, handle._graph_secret) == ("routes-b", "secret-b")
    finally:
        handle._graph_secret, handle._driver_home, handle._driver_token = saved
