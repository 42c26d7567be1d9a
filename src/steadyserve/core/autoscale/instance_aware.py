"""SkyServe's instance-aware autoscaler: replicas needed, from the capacity of those that exist.

With a per-accelerator ``target_qps_per_replica`` (``{"A100": 10, "V100": 5}``)
one replica is not one unit of capacity: an A100 replica carries 10 requests
per second, a V100 one 5. SkyServe's ``InstanceAwareRequestRateAutoscaler``
sizes the service from the replicas it has, and this module is that rule:

- a replica's capacity is its accelerator's target (:func:`capacity`): the key
  that is its name, else the first key whose name before ``:`` is (``A100``
  matches ``A100:1``; the count is not read), else the map's smallest target,
  also for a replica whose accelerator is not known;
- the live replicas (PENDING, PROVISIONING, STARTING, READY) of the current
  version carry ``total``. When the rate is at or above it, the service needs
  them all plus ``ceil((rate - total) / best)``, where ``best`` is the map's
  largest target: a replica still to launch is assumed to land on the best
  accelerator (the next decision adds more when it does not);
- below it, the READY replicas, largest first, are counted until they carry
  more than the rate (a service with none READY counts one ``best``): that is
  how few can carry it, the rest may go.

Worked example (SkyPilot's own test): 1200 requests in 60 s is 20 qps; an A100
and a V100 replica carry 10 + 5 = 15 <= 20, so 2 + ceil(5 / 10) = 3 replicas.
At 12 qps the A100 alone carries 10 <= 12, the V100 adds 5 (15 > 12): 2 stay.

One deviation, SkyPilot's own later fix: with no live replica (no capacity at
all) the rate is sized by ``best``, ``ceil(rate / best)``, where SkyPilot at the
ported test's commit answered ``min_replicas`` and so left a service at zero
with requests waiting. At rate 0 both give ``min_replicas``.

The bounds, the hysteresis, ``num_overprovision`` and the decision interval
are the request-rate autoscaler's (sky_policy.py, decide.py). Pure: values in,
a count out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["FleetReplica", "capacity", "needed"]


@dataclass(frozen=True)
class FleetReplica:
    """One live replica of the current version, as the sizing sees it."""

    accelerator: str | None
    """The name of the GPUs it holds (the controller's inventory), else the spec's
    first choice; None: no accelerator known."""
    ready: bool


def capacity(targets: Mapping[str, float], accelerator: str | None) -> float:
    """The requests per second a replica on ``accelerator`` is meant to carry
    (SkyServe's ``_get_target_qps_for_gpu_type``)."""
    if accelerator is not None:
        if accelerator in targets:
            return targets[accelerator]
        for key, qps in targets.items():
            if key.split(":")[0] == accelerator:
                return qps
    return min(targets.values())


def needed(targets: Mapping[str, float], rate: float, fleet: Sequence[FleetReplica]) -> int:
    """Replicas that carry ``rate`` requests per second, before the bounds."""
    best = max(targets.values())
    total = sum(capacity(targets, r.accelerator) for r in fleet)
    if total <= 0:
        return math.ceil(rate / best)
    if rate >= total:
        return len(fleet) + math.ceil((rate - total) / best)
    ready = sorted((capacity(targets, r.accelerator) for r in fleet if r.ready), reverse=True)
    count, carried = 0, 0.0
    for qps in ready or [best]:
        count += 1
        carried += qps
        if carried > rate:
            break
    return count
