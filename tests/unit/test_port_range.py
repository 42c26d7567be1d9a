"""STEADY_PORTS: parsed with one-line errors, and split into parts that never
overlap and never leave the range (searched with hypothesis over every size)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.port_range import MIN_PORTS, PortRangeError, first_free, from_env, parse


def test_parse_and_its_one_line_errors() -> None:
    found = parse(" 31500-31547 ")
    assert (found.low, found.high, found.size, str(found)) == (31500, 31547, 48, "31500-31547")
    assert from_env({}) is None and from_env({"STEADY_PORTS": ""}) is None
    for bad in ("31500", "a-b", "31547-31500", "80-100", "60000-70000", "31500-31503"):
        with pytest.raises(PortRangeError, match=r"^STEADY_PORTS: "):
            parse(bad)


@given(low=st.integers(1024, 65535 - MIN_PORTS + 1), size=st.integers(MIN_PORTS, 3000))
def test_parts_are_disjoint_inside_the_range_and_each_non_empty(low: int, size: int) -> None:
    high = min(65535, low + size - 1)
    found = parse(f"{low}-{high}")
    parts = [set(found.endpoints), set(found.replicas), set(found.singles)]
    assert all(parts), parts
    assert not (parts[0] & parts[1] or parts[1] & parts[2] or parts[0] & parts[2])
    assert set().union(*parts) <= set(range(low, high + 1))
    for part in (found.endpoints, found.replicas, found.singles):
        order = found.in_order(part)
        assert sorted(order) == list(range(low, high + 1))  # borrows only from the range
        assert order[: len(part)] == list(part)  # its own part first
    assert found.singles[0] == high and found.endpoints[0] == low


def test_first_free_skips_what_is_taken() -> None:
    taken = {31500, 31501}
    assert first_free(range(31500, 31510), free=lambda p: p not in taken) == 31502
    assert first_free(range(31500, 31502), free=lambda p: p not in taken) is None


def test_an_unnamed_gateway_takes_a_port_of_the_range_and_keeps_it() -> None:
    from steadyserve.controller.endpoint import gateway_port_in

    found = parse("31748-31795")
    assert gateway_port_in(found, 31750, set()) == 31750  # in the range: kept
    port = gateway_port_in(found, 8000, {31748})  # Ray's default: moved into the range
    assert port in found.endpoints and port != 31748
