"""A Python replica's own count as the controller reads it: its ``/-/info`` (read_info)
and the ``ongoing_requests`` in it (ongoing_of), the two steps poll_own_counts takes."""

from __future__ import annotations

import aiohttp

from steadyserve.controller.load import CountTarget, ongoing_of, read_info


async def read_own_count(
    session: aiohttp.ClientSession, target: CountTarget, timeout: float = 1.0
) -> float | None:
    """The runner's ``ongoing_requests`` from its ``/-/info``, or None if it did not say."""
    return ongoing_of(await read_info(session, target, timeout))
