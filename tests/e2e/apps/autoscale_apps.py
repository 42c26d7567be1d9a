"""Python replicas for the autoscaling end-to-end tests."""

from __future__ import annotations

import asyncio

from starlette.requests import Request


class Slow:
    """Answers after ``?s=`` seconds (default 0.3): each request holds the replica a while,
    so concurrent clients show as ongoing requests."""

    async def __call__(self, request: Request) -> str:
        await asyncio.sleep(min(float(request.query_params.get("s", "0.3")), 5.0))
        return "ok"
