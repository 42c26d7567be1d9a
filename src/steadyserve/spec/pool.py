"""SkyPilot's ``pool:``: workers that ran ``setup`` once and run managed jobs.

A pool file is a task with a ``pool:`` section and (usually) no ``run``
(``sky jobs pool apply -p NAME pool.yaml``). It has a fixed size
(``workers: N``) or autoscales on the job queue between ``min_workers`` and
``max_workers`` (SkyPilot's QueueLengthAutoscaler: core/autoscale/queue.py).
SkyPilot's own spec keeps the pool in the service section, with ``workers``
beside it; a file's top-level ``pool:`` becomes ``service.pool`` (models.py),
so there is one model and one set of checks, SkyPilot's, each one line.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from steadyserve.spec.base import _Model
from steadyserve.spec.errors import _fail
from steadyserve.spec.fields import NonNegativeInt, PositiveInt, Seconds

DEFAULT_QUEUE_LENGTH_THRESHOLD = 1
"""SkyPilot's AUTOSCALER_DEFAULT_QUEUE_LENGTH_THRESHOLD: with ``max_workers``
and no threshold, one waiting job is enough to add a worker."""
DEFAULT_UPSCALE_DELAY_S = 300.0
DEFAULT_DOWNSCALE_DELAY_S = 1200.0
"""SkyServe's default delays (sky/serve/constants.py), which its pools share."""


class PoolPolicy(_Model):
    """``pool:``: how many workers, fixed or scaled by the length of the job queue."""

    workers: NonNegativeInt | None = None
    min_workers: NonNegativeInt | None = None
    max_workers: NonNegativeInt | None = None
    queue_length_threshold: PositiveInt | None = None
    """More pending jobs than this adds a worker; fewer takes one away (SkyPilot's rule)."""
    upscale_delay_seconds: Seconds | None = None
    downscale_delay_seconds: Seconds | None = None

    @model_validator(mode="after")
    def _skypilot_rules(self) -> PoolPolicy:
        """SkyPilot's four checks of a pool (sky/serve/service_spec.py), in its order."""
        if self.workers is None and self.min_workers is None and self.max_workers is None:
            raise _fail(
                "needs workers: N, or both min_workers and max_workers (an autoscaled pool)"
            )
        if self.queue_length_threshold is not None and self.max_workers is None:
            raise _fail(
                "queue_length_threshold needs max_workers (it scales between min_workers"
                " and max_workers)"
            )
        if self.min_workers is not None and self.max_workers is None:
            raise _fail("min_workers needs max_workers (an autoscaled pool has both bounds)")
        if (
            self.min_workers is not None
            and self.max_workers is not None
            and self.min_workers > self.max_workers
        ):
            raise _fail(
                "min_workers ({low}) must be <= max_workers ({high})",
                low=self.min_workers,
                high=self.max_workers,
            )
        return self

    @property
    def autoscales(self) -> bool:
        """SkyPilot autoscales a pool exactly when it has ``max_workers``."""
        return self.max_workers is not None

    @property
    def floor(self) -> int:
        """The fewest workers: ``min_workers``, else ``workers`` (SkyPilot's
        ``min_replicas``); an autoscaled pool with neither may go to zero."""
        if self.min_workers is not None:
            return self.min_workers
        return self.workers if self.workers is not None else 0

    @property
    def ceiling(self) -> int:
        """The most workers: ``max_workers``, else the fixed size."""
        return self.max_workers if self.max_workers is not None else self.floor

    @property
    def threshold(self) -> int:
        if self.queue_length_threshold is not None:
            return self.queue_length_threshold
        return DEFAULT_QUEUE_LENGTH_THRESHOLD

    @property
    def upscale_delay_s(self) -> float:
        up = self.upscale_delay_seconds
        return DEFAULT_UPSCALE_DELAY_S if up is None else up

    @property
    def downscale_delay_s(self) -> float:
        down = self.downscale_delay_seconds
        return DEFAULT_DOWNSCALE_DELAY_S if down is None else down


def fold_workers(data: Any) -> Any:
    """SkyPilot's service section keeps ``workers`` beside ``pool:``; it is the
    pool's size (``pool.workers`` wins when both are given, as in SkyPilot)."""
    if not isinstance(data, dict) or data.get("pool") is None or "workers" not in data:
        return data
    rest = {k: v for k, v in data.items() if k != "workers"}
    pool = data["pool"]
    if isinstance(pool, dict):
        rest["pool"] = {"workers": data["workers"], **pool}
    return rest
