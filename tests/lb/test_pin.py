"""X-Steady-Version through a real LB: pins, is stripped, and a pin to a version
with no ready replica gets a clear 503."""

from __future__ import annotations

import json

from _lb_helpers import LBProcess, request


def test_pin_reaches_its_version_and_is_stripped(shared_lb: LBProcess) -> None:
    # --static-routes lists every replica as version 1.
    status, _, data = request(shared_lb.port, "GET", "/echo", headers={"X-Steady-Version": "1"})
    assert status == 200, data
    headers = json.loads(data)["headers"]
    assert not any(k.lower() == "x-steady-version" for k in headers), headers


def test_pin_to_a_version_without_replicas_is_503(shared_lb: LBProcess) -> None:
    status, _, data = request(shared_lb.port, "GET", "/echo", headers={"X-Steady-Version": "2"})
    assert status == 503
    assert b"no ready replica of version 2" in data


def test_pin_that_is_not_a_version_is_400(shared_lb: LBProcess) -> None:
    status, _, data = request(shared_lb.port, "GET", "/echo", headers={"x-steady-version": "v2"})
    assert status == 400 and b"X-Steady-Version" in data
