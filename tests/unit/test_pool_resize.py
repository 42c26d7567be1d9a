"""``steady jobs pool apply -p NAME --workers N``: the running spec at a fixed size
of N, everything else as it was; a size that is not a whole number in range is
refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steadyserve.controller.errors import BadInput
from steadyserve.controller.pool_api import MAX_WORKERS, resized
from steadyserve.spec import ServiceSpec
from steadyserve.spec.loading import parse_service


def _pool(tmp: Path, pool: dict[str, object]) -> ServiceSpec:
    doc = {"name": "batch", "setup": "echo hi", "envs": {"A": "1"}, "pool": pool}
    return parse_service(doc, base_dir=tmp)


def test_a_fixed_pool_gets_the_new_size_and_keeps_the_rest(tmp_path: Path) -> None:
    spec = _pool(tmp_path, {"workers": 2})
    new = ServiceSpec.from_json(resized(spec.spec_json(), 5))
    assert new.service.pool is not None and new.service.pool.workers == 5
    assert new.service.target_replicas == 5
    assert (new.setup, new.envs) == (spec.setup, spec.envs)


def test_an_autoscaled_pool_becomes_a_fixed_one(tmp_path: Path) -> None:
    spec = _pool(
        tmp_path,
        {"min_workers": 1, "max_workers": 4, "queue_length_threshold": 3},
    )
    new = ServiceSpec.from_json(resized(spec.spec_json(), 3))
    assert new.service.pool is not None
    assert new.service.pool.model_dump(exclude_none=True) == {"workers": 3}
    assert not new.service.pool.autoscales


@pytest.mark.parametrize("workers", [-1, MAX_WORKERS + 1, True, "3", 2.5, None])
def test_a_bad_size_is_refused(tmp_path: Path, workers: object) -> None:
    spec = _pool(tmp_path, {"workers": 2})
    with pytest.raises(BadInput, match=f"--workers must be a whole number from 0 to {MAX_WORKERS}"):
        resized(spec.spec_json(), workers)


def test_zero_workers_is_a_size(tmp_path: Path) -> None:
    spec = _pool(tmp_path, {"workers": 2})
    assert json.loads(resized(spec.spec_json(), 0))["service"]["pool"] == {"workers": 0}
