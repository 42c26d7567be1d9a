"""Which replicas go when the target drops: those not serving first, then the idlest,
then the newest.

A replica that is not READY takes no new request, so stopping it costs nothing
(SkyServe orders scale-down by status the same way). With a per-accelerator
target, the replicas that carry least go next (SkyServe's instance-aware
autoscaler: the count it kept assumed the largest stay). Then the replica with the
fewest requests in flight: a stopping replica drains first, so a busy one (a long
LLM stream) would linger for minutes while an idle one stayed. Then the newest:
the oldest have warm caches and a record of working.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Candidate", "choose_victims"]


@dataclass(frozen=True)
class Candidate:
    replica_id: int
    ready: bool
    launched_at: float
    capacity: float = 0.0
    """The requests per second its accelerator carries (per-accelerator targets only)."""
    in_flight: int = 0
    """Requests the load balancer has on it now."""


def choose_victims(candidates: Iterable[Candidate], count: int) -> list[int]:
    """Ids of ``count`` replicas to stop (fewer if there are fewer), in stopping order.

    Not-ready before ready; within each, the smaller capacity first, then the
    fewest requests in flight, then the newest (later launch, then the higher id,
    which is newer because ids are never reused).
    """
    if count <= 0:
        return []
    ranked = sorted(
        candidates,
        key=lambda c: (c.ready, c.capacity, c.in_flight, -c.launched_at, -c.replica_id),
    )
    return [c.replica_id for c in ranked[:count]]
