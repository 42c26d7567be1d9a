"""A toy routing policy written as a new one would be: the replica with the lowest
id that has room and was not tried yet. Registered only by the test that shows a
policy plugs in."""

from __future__ import annotations

from collections.abc import Container, Sequence

from steadyserve.core.routing.policies import NO_EXCLUDE, NO_KEY, C


class LowestId:
    name = "lowest_id"
    request_key: str | None = None

    def choose(
        self,
        candidates: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        eligible = [
            c
            for c in candidates
            if c.id not in exclude and (max_ongoing <= 0 or c.inflight < max_ongoing)
        ]
        return min(eligible, key=lambda c: c.id, default=None)

    def forget(self, replica_id: int) -> None:
        """Nothing is kept per replica."""
