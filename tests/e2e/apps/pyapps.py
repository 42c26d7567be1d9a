"""Python replicas for the end-to-end tests."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request


class Streamer:
    """Streams three chunks; after the first it waits for the file named by ?gate=."""

    def __call__(self, request: Request) -> Iterator[str]:
        gate = request.query_params.get("gate", "")

        def chunks() -> Iterator[str]:
            yield "data: chunk-0\n\n"
            deadline = time.monotonic() + 30
            while gate and not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            yield "data: chunk-1\n\n"
            yield "data: chunk-2\n\n"

        return chunks()


class Broken:
    """A version whose replicas cannot start."""

    def __init__(self) -> None:
        raise RuntimeError("model file is corrupt")

    def __call__(self, request: Request) -> Any:
        return "unreachable"
