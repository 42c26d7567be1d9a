"""A two-deployment graph for the handle end-to-end tests."""

from __future__ import annotations

from starlette.requests import Request

from steadyserve import serve
from steadyserve.serve.handle import DeploymentHandle


@serve.deployment
class Callee:
    """Reached through handles only (no ``__call__``)."""

    def ping(self) -> str:
        return "pong"


@serve.deployment
class Caller:
    def __init__(self, callee: DeploymentHandle) -> None:
        self.callee = callee

    async def __call__(self, request: Request) -> str:
        answer: str = await self.callee.ping.remote()
        return answer


app = Caller.bind(Callee.bind())
