"""A graph for the isolation end-to-end tests of handles: ``Prober`` calls ``Callee``
through a handle (``/ping``) and says what it can reach from its own network
namespace (``/reach``): the controller's API over TCP, and over the routes-only
Unix socket the routes, the rest of the API, and the routes without a token."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
from starlette.requests import Request
from starlette.responses import JSONResponse

from steadyserve import serve
from steadyserve.serve.handle import DeploymentHandle


@serve.deployment
class Callee:
    """Reached through handles only (no ``__call__``)."""

    def ping(self) -> str:
        return "pong"


async def _status(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    """The answer's status, or the error's class name when none came."""
    try:
        timeout = aiohttp.ClientTimeout(total=3)
        async with session.get(url, headers=headers, timeout=timeout) as response:
            return response.status
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        return type(exc).__name__


async def reach(controller: str) -> dict[str, Any]:
    """``controller``: its URL, from the test (the home's controller.json is not in
    an isolated replica's sandbox)."""
    token = {"Authorization": f"Bearer {os.environ['STEADY_ROUTES_TOKEN']}"}
    service = os.environ["STEADY_SERVICE_NAME"]
    async with aiohttp.ClientSession() as tcp:
        api_tcp = await _status(tcp, f"{controller}/api/v1/services", token)
        routes_tcp = await _status(tcp, f"{controller}/api/v1/lb/{service}/routes?wait=0", token)
    connector = aiohttp.UnixConnector(path=os.environ["STEADY_ROUTES_SOCKET"])
    async with aiohttp.ClientSession(connector=connector) as unix:
        base = "http://localhost"
        return {
            "api_tcp": api_tcp,
            "routes_tcp": routes_tcp,
            "api_unix": await _status(unix, f"{base}/api/v1/services", token),
            "routes_unix": await _status(unix, f"{base}/api/v1/lb/{service}/routes?wait=0", token),
            "routes_unix_no_token": await _status(
                unix, f"{base}/api/v1/lb/{service}/routes?wait=0", {}
            ),
        }


@serve.deployment
class Prober:
    def __init__(self, callee: DeploymentHandle) -> None:
        self.callee = callee

    async def __call__(self, request: Request) -> Any:
        if request.url.path == "/reach":
            return JSONResponse(await reach(request.query_params["controller"]))
        answer: str = await self.callee.ping.remote()
        return answer


app = Prober.bind(Callee.bind())
