"""The controller's sense of time, injected so its rules run on simulated time in tests.

Nothing else in controller/ reads time: every module asks a :class:`Clock`.

- ``now()`` is monotonic time: intervals and deadlines (update deadlines, pauses,
  drain waits, autoscaling delays, restart back-offs). It never jumps when the
  wall clock is set.
- ``wall()`` is wall time: what rows and reports record (``launched_at``,
  ``ready_at``, ``created_at``, an event's time) and what survives a restart.
  A deadline that must survive a controller restart is kept as a wall time.
- ``sleep()`` is every wait of a replica's task (probe periods, drain polls).

The reconcile loop's own tick is not here: tests call ``tick()`` themselves,
and FakeClock (steadyserve/sim/clock.py) moves both times together.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Real time."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
"""The one real clock a controller process runs on (tests inject a FakeClock)."""
