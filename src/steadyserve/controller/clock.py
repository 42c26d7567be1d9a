"""The controller's sense of time, injected so its rules run on simulated time in tests.

``now`` is wall time (what rows record: launched_at, ready_at, update deadlines);
``monotonic`` measures intervals (autoscaling, drain deadlines); ``sleep`` is
every wait of a replica's task (probe periods, drain polls). The reconcile
loop's own tick is not here: tests call ``tick()`` themselves.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Real time."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
