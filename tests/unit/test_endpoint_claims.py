"""Endpoint ports are claimed, so two controllers never give one port to two services.

Two homes of one user choosing at once each found 30001 free (neither load
balancer had bound it yet), and both LBs then bound it: their listeners share
ports with SO_REUSEPORT, so the kernel lets them, and clients reached either
service. Each ``EndpointClaims`` here stands for one controller, each Store for
its home.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steadyserve.controller.endpoint import EndpointClaims, claim
from steadyserve.controller.errors import BadInput
from steadyserve.store import Store


def stores(tmp_path: Path) -> tuple[Store, Store]:
    return Store(tmp_path / "a.db"), Store(tmp_path / "b.db")


def test_two_controllers_choosing_at_once_get_two_ports(tmp_path: Path) -> None:
    home_a, home_b = stores(tmp_path)
    first, second = EndpointClaims(), EndpointClaims()
    port_a = first.choose(home_a, None)
    port_b = second.choose(home_b, None)  # before either records or binds its port
    assert port_a != port_b
    first.release(port_a)
    second.release(port_b)


def test_a_requested_port_claimed_elsewhere_is_in_use(tmp_path: Path) -> None:
    home_a, home_b = stores(tmp_path)
    first, second = EndpointClaims(), EndpointClaims()
    port = first.choose(home_a, None)
    with pytest.raises(BadInput, match=f"service.port: port {port} is already in use"):
        second.choose(home_b, port)
    first.release(port)
    assert second.choose(home_b, port) == port  # released: free again
    second.release(port)


def test_a_restarted_controller_holds_its_services_ports_again(tmp_path: Path) -> None:
    home_a, _ = stores(tmp_path)
    before = EndpointClaims()
    port = before.choose(home_a, None)
    assert not EndpointClaims().hold(port)  # another controller cannot take it
    before.release(port)  # the first controller stopped
    after = EndpointClaims()
    assert after.hold(port) and after.hold(port)  # idempotent
    assert claim(port) is None
    after.release(port)
    held = claim(port)
    assert held is not None
    held.close()
