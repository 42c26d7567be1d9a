from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _lb_helpers import LBProcess, Upstream


@pytest.fixture(scope="module")
def two_upstreams() -> Iterator[tuple[Upstream, Upstream]]:
    a, b = Upstream("up1"), Upstream("up2")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture(scope="module")
def shared_lb(
    two_upstreams: tuple[Upstream, Upstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LBProcess]:
    """One LB over two upstreams for the tests that only read responses."""
    a, b = two_upstreams
    home = tmp_path_factory.mktemp("home")
    with LBProcess(home, "--static-routes", f"{a.address},{b.address}") as lb:
        yield lb
