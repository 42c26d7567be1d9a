"""Simulated time: one number for wall and monotonic time, sleepers woken only when
the simulation advances it, and the settling of the event loop between steps.

Every wait of the controller's tasks is a :meth:`FakeClock.sleep`; nothing in a run
waits on real time, so a run's order of events is a function of its seed alone.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

SETTLE_ROUNDS = 200
"""At most this many passes of the event loop per settle (a task that never waits on
the clock would otherwise spin the settle forever)."""


class FakeClock:
    """Wall and monotonic time in one number; sleepers wake only on :meth:`advance`."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + max(0.0, seconds), next(self._order), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move time on; wake, in the order they were due, the sleepers now due."""
        self.t += seconds
        while self._sleepers and self._sleepers[0][0] <= self.t:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)


def _pending(loop: asyncio.AbstractEventLoop) -> int:
    """Callbacks ready to run now (CPython's loop keeps them in ``_ready``)."""
    ready = getattr(loop, "_ready", None)
    return len(ready) if ready is not None else 1


async def settle(rounds: int = SETTLE_ROUNDS) -> int:
    """Let every task run until each waits on the clock (no real time passes).

    Returns the passes taken. A pass is one ``sleep(0)``: every callback ready before
    it runs once, in the loop's FIFO order, so the interleaving is deterministic."""
    loop = asyncio.get_running_loop()
    for done in range(rounds):
        if not _pending(loop):
            return done
        await asyncio.sleep(0)
    return rounds
