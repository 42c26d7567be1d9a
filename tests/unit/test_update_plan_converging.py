"""A change of ``user_config`` alone restarts while the service still converges.

Found by the simulator (seed 385): after an abort, an in-place change applied to no
replica, succeeded at once, and the replicas launched to converge refused its config
with no update left to roll it back. controller/update_plan.py decides it purely.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steadyserve.controller.errors import BadInput
from steadyserve.controller.update_plan import describe_update
from steadyserve.core.states import UpdateMode
from steadyserve.spec import ServiceSpec, parse_service


def spec(tmp_path: Path, user_config: dict[str, Any], mode: str = "rolling") -> ServiceSpec:
    doc = {
        "name": "svc",
        "service": {
            "replicas": 2,
            "readiness_probe": "/health",
            "user_config": user_config,
            "reconfigure_path": "/reconfigure",
            "update_mode": mode,
        },
        "run": "python server.py --port $PORT",
    }
    return parse_service(doc, base_dir=tmp_path)


def mode_of(
    tmp_path: Path, possible: bool, requested: str | None = None, file_mode: str = "rolling"
) -> UpdateMode:
    old, new = spec(tmp_path, {"v": 0}, file_mode), spec(tmp_path, {"v": 1}, file_mode)
    plan = describe_update(
        old,
        new,
        old_hash=None,
        new_hash=None,
        requested_mode=requested,
        replicas=[],
        next_version=2,
        in_place_possible=possible,
    )
    return plan.mode


def test_in_place_when_the_fleet_runs_the_target(tmp_path: Path) -> None:
    assert mode_of(tmp_path, True) is UpdateMode.IN_PLACE


@pytest.mark.parametrize(
    ("requested", "file_mode", "expected"),
    [
        (None, "rolling", "rolling"),
        (None, "blue_green", "blue_green"),
        ("canary", "rolling", "canary"),
    ],
)
def test_a_restart_by_the_mode_asked_while_converging(
    tmp_path: Path, requested: str | None, file_mode: str, expected: str
) -> None:
    assert mode_of(tmp_path, False, requested, file_mode) == UpdateMode(expected)


def test_a_plan_made_in_place_restarts_by_the_mode_it_was_asked(tmp_path: Path) -> None:
    """The commit checks again after its last await (an abort may come in between)."""
    old, new = spec(tmp_path, {"v": 0}), spec(tmp_path, {"v": 1})
    plan = describe_update(
        old,
        new,
        old_hash=None,
        new_hash=None,
        requested_mode="blue_green",
        replicas=[],
        next_version=2,
    )
    assert plan.in_place
    assert plan.restarting(new).mode is UpdateMode("blue_green")
    bad = describe_update(
        old,
        new,
        old_hash=None,
        new_hash=None,
        requested_mode="sideways",
        replicas=[],
        next_version=2,
    )
    with pytest.raises(BadInput, match="update mode sideways"):
        bad.restarting(new)
