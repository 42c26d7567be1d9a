"""SkyPilot's own service-spec tests, ported.

Source: repository skypilot-org/skypilot, path
tests/unit_tests/test_sky/test_service_spec.py, commit
e072ff3524df137f5028155776e381254c05cafb. Every test function is here, in its
order, with its inputs and expected values as written; only the call surface is
translated. SkyPilot's ``SkyServiceSpec.from_yaml_config(config)`` takes the
``service:`` section of a task, so here it is :func:`steadyserve.spec.parse_service`
of a file whose ``service:`` is that config; a pool file needs nothing else (no
``run``: its workers run the jobs' own). SkyPilot's spec answers with replica
counts (``min_replicas``, ``max_replicas``) and the pool's knobs; ours keeps them
as the pool's (``spec.service.pool``: ``floor``, ``max_workers``, ...), so the
adapter reads them off as SkyPilot names them.

At this commit the file tests one thing: SkyPilot's *pools* (``pool:``, workers
that run managed jobs, ``sky jobs pool apply``; here ``steady jobs pool apply``,
docs/pools.md). The 4 bad pools are refused in one line naming ``service.pool``
and what is wrong (SkyPilot's message is kept as ``skypilot_says``, with the
words both name); the 6 good ones are accepted with SkyPilot's values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steadyserve.spec import ServiceSpec, SpecError, parse_service
from steadyserve.spec.pool import PoolPolicy


@dataclass(frozen=True)
class SkyPoolView:
    """The attributes SkyPilot's ``SkyServiceSpec`` gives a pool, read off ours."""

    spec: ServiceSpec

    @property
    def _pool(self) -> PoolPolicy:
        pool = self.spec.service.pool
        assert pool is not None, "not a pool"
        return pool

    @property
    def min_replicas(self) -> int:
        return self._pool.floor

    @property
    def max_replicas(self) -> int | None:
        return self._pool.max_workers

    @property
    def queue_length_threshold(self) -> int | None:
        return self._pool.threshold if self._pool.autoscales else None

    @property
    def upscale_delay_seconds(self) -> float | None:
        return self._pool.upscale_delay_seconds

    @property
    def downscale_delay_seconds(self) -> float | None:
        return self._pool.downscale_delay_seconds


class service_spec:
    """SkyPilot's module name, so the bodies read as written."""

    class SkyServiceSpec:
        @staticmethod
        def from_yaml_config(config: dict[str, Any]) -> SkyPoolView:
            spec = parse_service({"service": config}, base_dir=Path(__file__).parent)
            return SkyPoolView(spec)


def refuses(config: dict[str, Any], skypilot_says: str) -> None:
    """Ours refuses where SkyPilot raises ``ValueError(skypilot_says)``: one line,
    naming ``service.pool`` and the pool fields SkyPilot's message names."""
    with pytest.raises(SpecError) as refused:
        service_spec.SkyServiceSpec.from_yaml_config(config)
    assert refused.value.lines() == [str(refused.value)], refused.value.lines()
    assert refused.value.path == "service.pool", str(refused.value)
    fields = {"workers", "min_workers", "max_workers", "queue_length_threshold"}
    named = {word.strip("(),") for word in skypilot_says.split()} & fields
    assert named and all(field in refused.value.message for field in named), (
        named,
        refused.value.message,
    )


class TestPoolConfiguration:
    """Test pool configuration validation in SkyServiceSpec."""

    def test_pool_with_min_and_max_workers_without_workers(self) -> None:
        config = {
            "pool": {
                "min_workers": 1,
                "max_workers": 5,
            },
            "readiness_probe": "/",
        }
        spec: Any = service_spec.SkyServiceSpec.from_yaml_config(config)
        assert spec.min_replicas == 1
        assert spec.max_replicas == 5

    def test_pool_with_only_workers(self) -> None:
        config = {
            "pool": {},
            "workers": 3,
            "readiness_probe": "/",
        }
        spec: Any = service_spec.SkyServiceSpec.from_yaml_config(config)
        assert spec.min_replicas == 3
        assert spec.max_replicas is None

    def test_pool_with_min_max_workers_and_queue_length_threshold(self) -> None:
        config = {
            "pool": {
                "min_workers": 2,
                "max_workers": 10,
                "queue_length_threshold": 5,
            },
            "readiness_probe": "/",
        }
        spec: Any = service_spec.SkyServiceSpec.from_yaml_config(config)
        assert spec.min_replicas == 2
        assert spec.max_replicas == 10
        assert spec.queue_length_threshold == 5

    def test_pool_with_min_max_workers_and_delays(self) -> None:
        config = {
            "pool": {
                "min_workers": 1,
                "max_workers": 8,
                "upscale_delay_seconds": 30,
                "downscale_delay_seconds": 60,
            },
            "readiness_probe": "/",
        }
        spec: Any = service_spec.SkyServiceSpec.from_yaml_config(config)
        assert spec.min_replicas == 1
        assert spec.max_replicas == 8
        assert spec.upscale_delay_seconds == 30
        assert spec.downscale_delay_seconds == 60

    def test_pool_without_workers_and_without_min_max_fails(self) -> None:
        config = {
            "pool": {},
            "readiness_probe": "/",
        }
        refuses(
            config,
            skypilot_says="One of workers, or both min_workers and max_workers must be set",
        )

    def test_pool_with_min_workers_but_no_max_workers_fails(self) -> None:
        config = {
            "pool": {
                "min_workers": 2,
            },
            "readiness_probe": "/",
        }
        refuses(config, skypilot_says="max_workers must be set when min_workers is specified")

    def test_pool_with_min_workers_greater_than_max_workers_fails(self) -> None:
        config = {
            "pool": {
                "min_workers": 10,
                "max_workers": 5,
            },
            "readiness_probe": "/",
        }
        refuses(config, skypilot_says="min_workers (10) must be <= max_workers (5)")

    def test_pool_with_queue_length_threshold_but_no_max_workers_fails(self) -> None:
        config = {
            "pool": {
                "queue_length_threshold": 5,
            },
            "workers": 3,
            "readiness_probe": "/",
        }
        refuses(
            config,
            skypilot_says="max_workers must be set when queue_length_threshold is specified",
        )

    def test_pool_with_zero_min_workers(self) -> None:
        config = {
            "pool": {
                "min_workers": 0,
                "max_workers": 5,
            },
            "readiness_probe": "/",
        }
        spec: Any = service_spec.SkyServiceSpec.from_yaml_config(config)
        assert spec.min_replicas == 0
        assert spec.max_replicas == 5

    def test_pool_with_equal_min_and_max_workers(self) -> None:
        config = {
            "pool": {
                "min_workers": 3,
                "max_workers": 3,
            },
            "readiness_probe": "/",
        }
        spec: Any = service_spec.SkyServiceSpec.from_yaml_config(config)
        assert spec.min_replicas == 3
        assert spec.max_replicas == 3
