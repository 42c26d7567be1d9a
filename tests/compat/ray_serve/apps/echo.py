"""A one-class application for the Ray Serve config tests: answers with its
``user_config`` message, the path it was asked for, and its pid."""

from __future__ import annotations

import os
from typing import Any

from starlette.requests import Request


class Echo:
    def __init__(self) -> None:
        self.message = "unset"

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        self.message = str(user_config.get("message", "unset"))

    async def __call__(self, request: Request) -> Any:
        await request.body()
        return {
            "message": self.message,
            "path": request.url.path,
            "greeting": os.environ.get("GREETING", ""),
            "pid": os.getpid(),
        }
