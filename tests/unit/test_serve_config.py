"""Ray's ``AutoscalingConfig`` / ``AutoscalingPolicy`` objects (serve/config.py) are
taken as the dicts they stand for, and a callable policy is named by import path
in the service document (serve/policies.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steadyserve import serve
from steadyserve.serve import policies
from steadyserve.serve.config import AutoscalingConfig, AutoscalingPolicy


def scale(context: Any) -> tuple[int, dict[str, Any]]:
    return 2, {}


def test_an_autoscaling_config_object_is_the_dict_it_stands_for() -> None:
    config = AutoscalingConfig(max_replicas=4, policy=AutoscalingPolicy(policy_function=scale))
    assert config.max_replicas == 4

    @serve.deployment(autoscaling_config=config)
    class Model:
        pass

    assert Model.user_options["autoscaling_config"] == {
        "max_replicas": 4,
        "policy": {"policy_function": scale},
    }


def test_a_policy_function_must_be_an_import_path_or_a_callable() -> None:
    with pytest.raises(TypeError, match="must be an import path or a callable, not int"):
        AutoscalingPolicy(policy_function=3)  # type: ignore[arg-type]


def test_callable_policies_are_shipped_and_import_paths_left_alone(tmp_path: Path) -> None:
    named = serve.deployment(
        autoscaling_config={"policy": {"policy_function": "mod:fn"}}, name="Named"
    )(lambda: None)
    called = serve.deployment(
        autoscaling_config={"policy": {"policy_function": scale}}, name="My Model"
    )(lambda: None)
    paths = policies.ship([named.bind(), called.bind()], tmp_path, [str(tmp_path)])
    assert paths == {"My Model": "steady_policies:My_Model"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policies.pkl", "steady_policies.py"]
    assert policies.ship([named.bind()], tmp_path, []) == {}
    assert list(tmp_path.iterdir()) == []  # a later run with none leaves none behind
