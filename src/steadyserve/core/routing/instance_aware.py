"""SkyServe's ``instance_aware_least_load``: least load, weighed by what each replica can carry.

Replicas on different accelerators serve at different rates (an H100 replica
may carry 10 requests per second where an L4 carries 3). SkyServe's answer,
kept here with its rules: ``service.replica_policy.target_qps_per_replica`` may
map accelerators to their per-replica target (``{"H100:1": 10, L4: 3}``), and a
replica's load is its in-flight count divided by the target of its accelerator.
The replica with the smallest such load gets the request.

The target of an accelerator (:func:`target_qps_for`, SkyServe's
``_get_target_qps_for_accelerator``): the key that is the accelerator's name,
else the first key whose name before ``:`` is (``A100`` matches ``A100:1``),
else 1.0. A target that is not above zero counts as 1.0 (:func:`normalized_load`),
so no replica divides by zero. The controller puts the target on each route as
its ``capacity`` (controller/routing.py), so the policy itself only divides.

Ties go to the first replica after a rotating start, as ``least_load`` here
does: with sequential traffic every load is zero at each pick, and a fixed scan
order would send everything to the first replica.

Pure: no I/O, no clock, nothing imported from the load balancer.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

from steadyserve.core.routing.policies import C, least_loaded

FALLBACK_QPS = 1.0
"""SkyServe's target for an accelerator the map does not name, and for a target <= 0."""

_NO_EXCLUDE: frozenset[int] = frozenset()


def target_qps_for(accelerator: str | None, targets: Mapping[str, float]) -> float:
    """The per-replica target of ``accelerator`` in ``targets`` (SkyServe's matching).

    A direct key first, then a key with a count (``A100:1``) whose name is the
    accelerator; neither (or no accelerator): :data:`FALLBACK_QPS`."""
    if accelerator is None:
        return FALLBACK_QPS
    if accelerator in targets:
        return targets[accelerator]
    for key, qps in targets.items():
        if key.split(":")[0] == accelerator:
            return qps
    return FALLBACK_QPS


def normalized_load(inflight: int, target_qps: float) -> float:
    """In-flight requests over the replica's target; a target <= 0 counts as 1.0."""
    return inflight / (target_qps if target_qps > 0 else FALLBACK_QPS)


def _normalized(replica: C) -> float:
    return normalized_load(replica.inflight, replica.capacity)


def capacity_for(accelerator: str | None, targets: Mapping[str, float]) -> float:
    """The route's ``capacity`` for a replica on ``accelerator``: its target, > 0."""
    qps = target_qps_for(accelerator, targets)
    return qps if qps > 0 else FALLBACK_QPS


class InstanceAwareLeastLoad:
    """Smallest in-flight count over capacity among the eligible replicas."""

    name = "instance_aware_least_load"
    request_key: str | None = None

    def __init__(self) -> None:
        self._start = 0

    def choose(
        self,
        replicas: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = _NO_EXCLUDE,
        key: object = None,
    ) -> C | None:
        n = len(replicas)
        if n == 0:
            return None
        start = self._start % n
        self._start = start + 1
        return least_loaded(replicas, start, _normalized, max_ongoing, exclude)

    def forget(self, replica_id: int) -> None:
        """Nothing is kept per replica."""
