"""The gateway's port changes one at a time: a release (``serve.shutdown``, ``steady
down --all``) while a new application is deployed leaves the gateway running for
it. A real gateway process is started and stopped."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.lb._lb_helpers import free_port

from steadyserve.controller.gateway import GatewaySupervisor
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.spec.loading import parse_service


async def _supervised(gateway: GatewaySupervisor) -> bool:
    """Supervision rounds until the gateway runs (it waits out its restart backoff)."""
    for _ in range(50):
        gateway.supervise()
        if gateway.running:
            return True
        await asyncio.sleep(0.1)
    return False


def _spec(tmp: Path) -> ServiceSpec:
    doc = {"name": "app-a", "run": "true", "service": {"route_prefix": "/"}}
    return parse_service(doc, base_dir=tmp)


@pytest.mark.asyncio
async def test_a_deploy_while_the_last_service_goes_down_keeps_the_gateway(
    tmp_path: Path,
) -> None:
    specs = [_spec(tmp_path)]
    port = free_port()
    gateway = GatewaySupervisor(Home(tmp_path), "e", lambda: list(specs))
    await gateway.configure(port)
    assert await _supervised(gateway)
    try:
        specs.clear()  # the last service is down: serve.shutdown releases the gateway ...
        idle = asyncio.create_task(gateway.release())
        await asyncio.sleep(0.05)  # ... which is draining when a deploy comes
        specs.append(_spec(tmp_path))
        await gateway.configure(port)
        await idle
        assert gateway.port == port  # before: None, the new application had no gateway
        assert await _supervised(gateway)
        # With nothing left it does stop.
        specs.clear()
        await gateway.release()
        assert gateway.port is None and not gateway.running
    finally:
        await gateway.stop()
