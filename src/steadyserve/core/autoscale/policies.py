"""The two autoscaling policies as plain values, and the replica count each wants.

SkyServe's policy (``target_qps_per_replica``) counts requests started over a
fixed 60 s window; Ray Serve's (``target_ongoing_requests``) averages ongoing
requests over ``look_back_period_s``. Both clip to ``[min_replicas,
max_replicas]``. Field names and defaults are the anchors' own, so a SkyServe
``replica_policy`` or a Ray Serve ``autoscaling_config`` means here what it
means there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "QPS_WINDOW_S",
    "FixedPolicy",
    "OngoingPolicy",
    "Policy",
    "QpsPolicy",
    "clip",
    "ongoing_desired",
    "qps_desired",
]

QPS_WINDOW_S = 60.0
"""SkyServe's request-rate window: requests started in the last 60 s, divided by 60."""

BURST_FRACTION = 0.1
"""Burst mode looks at this fraction of the policy's window (3 s of Ray's 30 s)."""

BURST_RATIO = 2.0
"""Burst mode starts when short-window load exceeds this multiple of current capacity."""


@dataclass(frozen=True)
class FixedPolicy:
    """A fixed size: ``replicas: N``, or ``replica_policy`` with only ``min_replicas``."""

    replicas: int

    @property
    def min_replicas(self) -> int:
        return self.replicas

    @property
    def max_replicas(self) -> int:
        return self.replicas

    @property
    def initial(self) -> int:
        return self.replicas


@dataclass(frozen=True)
class QpsPolicy:
    """SkyServe's request-rate policy (``sky/serve/autoscalers.py``)."""

    min_replicas: int
    max_replicas: int
    target_qps_per_replica: float
    upscale_delay_seconds: float = 300.0
    downscale_delay_seconds: float = 1200.0
    num_overprovision: int = 0
    """Replicas run beyond the target (SkyServe's ``num_overprovision``)."""
    decision_interval_s: float = 20.0
    """SkyServe decides once this often (sky_policy.py), not on every tick."""
    burst: bool = False
    """SteadyServe's burst mode (decide.py), only on request."""
    per_accelerator: tuple[tuple[str, float], ...] = ()
    """A per-accelerator target as (key, target) pairs, in the file's order: the
    service is sized by the capacity of its replicas (instance_aware.py), and
    ``target_qps_per_replica`` is the map's largest target, what a replica still
    to launch is assumed to carry. Empty: one target for every replica."""

    @property
    def window_s(self) -> float:
        return QPS_WINDOW_S

    @property
    def targets(self) -> dict[str, float] | None:
        """The per-accelerator map, or None for one target."""
        return dict(self.per_accelerator) if self.per_accelerator else None

    @property
    def initial(self) -> int:
        return self.min_replicas


@dataclass(frozen=True)
class OngoingPolicy:
    """Ray Serve's default policy (``AutoscalingConfig`` and its queue-length policy)."""

    min_replicas: int = 1
    max_replicas: int = 1
    target_ongoing_requests: float = 2.0
    look_back_period_s: float = 30.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    downscale_to_zero_delay_s: float | None = None
    """The 1 -> 0 step waits this long; None means ``downscale_delay_s``."""
    upscaling_factor: float | None = None
    """Gain on upscaling decisions; None means 1 (take the full step)."""
    downscaling_factor: float | None = None
    initial_replicas: int | None = None
    """The count at deploy time; None means ``min_replicas``."""
    policy_function: str | None = None
    """Ray's custom policy (``module:func`` in the workdir); None: Ray's default policy."""
    burst: bool = False
    """SteadyServe's burst mode (decide.py), only on request."""

    @property
    def window_s(self) -> float:
        return self.look_back_period_s

    @property
    def initial(self) -> int:
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas

    @property
    def up_gain(self) -> float:
        return 1.0 if self.upscaling_factor is None else self.upscaling_factor

    @property
    def down_gain(self) -> float:
        return 1.0 if self.downscaling_factor is None else self.downscaling_factor

    @property
    def to_zero_delay_s(self) -> float:
        if self.downscale_to_zero_delay_s is None:
            return self.downscale_delay_s
        return self.downscale_to_zero_delay_s


Policy = FixedPolicy | QpsPolicy | OngoingPolicy


def clip(count: int, policy: Policy) -> int:
    return max(policy.min_replicas, min(policy.max_replicas, count))


def qps_desired(policy: QpsPolicy, rate: float) -> int:
    """SkyServe: ``ceil(qps / target_qps_per_replica)``, clipped; independent of the
    current count, so a steady rate always asks for the same number."""
    return clip(math.ceil(rate / policy.target_qps_per_replica), policy)


def ongoing_desired(policy: OngoingPolicy, ongoing: float, running: int) -> int:
    """Ray Serve's count for ``ongoing`` requests spread over ``running`` (> 0) replicas:
    its default policy's desired count through the scaling factors, clipped
    (ray_policy.py has the steps)."""
    from steadyserve.core.autoscale.ray_policy import default_desired, scaling_factors

    if running <= 0:
        raise ValueError("running must be > 0")
    desired = default_desired(policy, running, ongoing, running)
    return clip(scaling_factors(desired, running, policy), policy)
