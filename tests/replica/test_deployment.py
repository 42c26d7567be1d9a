"""``@deployment``: bare or called, options checked, the class left a plain class."""

from __future__ import annotations

from typing import Any

import pytest

from steadyserve.replica import DeploymentOptions, deployment
from steadyserve.wire.deployment import options_of


def test_bare_decorator_marks_the_class_and_returns_it() -> None:
    @deployment
    class Model:
        def __call__(self, request: object) -> str:
            return "ok"

    options = options_of(Model)
    assert options == DeploymentOptions()
    assert options.as_dict() == {}
    assert Model()(None) == "ok"  # still a plain class


def test_called_decorator_records_the_options_given() -> None:
    @deployment(
        num_replicas=2,
        user_config={"language": "french"},
        max_ongoing_requests=8,
        health_check_period_s=1,
        health_check_timeout_s=2.5,
        graceful_shutdown_wait_loop_s=0.5,
        graceful_shutdown_timeout_s=0,
    )
    class Model:
        def __init__(self, prefix: str = "") -> None:
            self.prefix = prefix

        def __call__(self, request: object) -> str:
            return self.prefix + "ok"

    options = options_of(Model)
    assert options is not None
    assert options.as_dict() == {
        "num_replicas": 2,
        "user_config": {"language": "french"},
        "max_ongoing_requests": 8,
        "health_check_period_s": 1,
        "health_check_timeout_s": 2.5,
        "graceful_shutdown_wait_loop_s": 0.5,
        "graceful_shutdown_timeout_s": 0,
    }
    assert Model("x: ")(None) == "x: ok"
    assert Model.__name__ == "Model"


def test_empty_call_is_the_same_as_bare() -> None:
    @deployment()
    class Model:
        def __call__(self, request: object) -> None:
            return None

    assert options_of(Model) == DeploymentOptions()


def test_options_are_not_inherited() -> None:
    @deployment(num_replicas=3)
    class Base:
        def __call__(self, request: object) -> None:
            return None

    class Child(Base):
        pass

    assert options_of(Child) is None
    assert options_of(Base) == DeploymentOptions(num_replicas=3)


def test_an_undecorated_class_has_no_options() -> None:
    class Plain:
        pass

    assert options_of(Plain) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_replicas": 0}, "deployment(num_replicas=0): must be an integer >= 1"),
        ({"num_replicas": True}, "deployment(num_replicas=True): must be an integer >= 1"),
        ({"max_ongoing_requests": 1.5}, "deployment(max_ongoing_requests=1.5): must be"),
        ({"health_check_period_s": 0}, "deployment(health_check_period_s=0): must be a number"),
        ({"health_check_timeout_s": "5"}, "deployment(health_check_timeout_s='5'): must be"),
        ({"graceful_shutdown_timeout_s": -1}, "deployment(graceful_shutdown_timeout_s=-1)"),
        ({"graceful_shutdown_wait_loop_s": float("nan")}, "graceful_shutdown_wait_loop_s=nan"),
        ({"user_config": {"f": object()}}, "deployment(user_config=...): not JSON-serializable"),
    ],
)
def test_bad_options_fail_at_decoration_naming_the_option(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        deployment(**kwargs)


def test_an_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="autoscaling_config"):
        deployment(autoscaling_config={})  # type: ignore[call-overload]


def test_only_classes_can_be_decorated() -> None:
    def handler(request: object) -> str:
        return "no"

    with pytest.raises(TypeError, match="decorates a class"):
        deployment(handler)  # type: ignore[type-var]
