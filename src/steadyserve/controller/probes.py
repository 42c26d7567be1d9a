"""Readiness probes: HTTP 200 within the timeout means ready, anything else not."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from steadyserve.controller.netns_http import request_in
from steadyserve.spec import ReadinessProbe


def new_probe_session() -> aiohttp.ClientSession:
    # No keep-alive: a pooled connection to a replica that just restarted would
    # fail a probe that a fresh connection passes.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=0))


async def probe_ready(
    session: aiohttp.ClientSession, host: str, port: int, probe: ReadinessProbe
) -> tuple[bool, str]:
    """Probe once; return (ready, why not)."""
    url = f"http://{host}:{port}{probe.path}"
    timeout = aiohttp.ClientTimeout(total=probe.timeout_seconds)
    try:
        if probe.post_data is not None:
            body = json.dumps(probe.post_data).encode()
            headers = {"Content-Type": "application/json", **probe.headers}
            request = session.post(url, data=body, headers=headers, timeout=timeout)
        else:
            request = session.get(url, headers=probe.headers, timeout=timeout)
        async with request as response:
            await response.read()
            if response.status == 200:
                return True, ""
            return False, f"readiness probe {probe.path} answered {response.status}"
    except asyncio.TimeoutError:
        return False, f"readiness probe {probe.path} timed out after {probe.timeout_seconds}s"
    except (aiohttp.ClientError, OSError) as exc:
        return False, f"readiness probe {probe.path} failed: {type(exc).__name__}"


async def probe_in_netns(
    netns: str, host: str, port: int, probe: ReadinessProbe
) -> tuple[bool, str]:
    """Probe a replica inside its own network namespace (``service.isolation``):
    the same request and verdicts as :func:`probe_ready`, one connection a probe."""
    method, body, headers = "GET", b"", dict(probe.headers)
    if probe.post_data is not None:
        method, body = "POST", json.dumps(probe.post_data).encode()
        headers = {"Content-Type": "application/json", **headers}
    try:
        status, _ = await asyncio.wait_for(
            request_in(netns, host, port, method, probe.path, headers, body),
            probe.timeout_seconds,
        )
    except asyncio.TimeoutError:
        return False, f"readiness probe {probe.path} timed out after {probe.timeout_seconds}s"
    except (OSError, ValueError) as exc:
        return False, f"readiness probe {probe.path} failed: {type(exc).__name__}"
    if status == 200:
        return True, ""
    return False, f"readiness probe {probe.path} answered {status}"
