# Ported from ray-project/ray (Apache-2.0),
# python/ray/serve/tests/unit/test_deployment_class.py at commit
# 05afc08c3c441b9f53d9add39dafbf49c78341a8. Every test function, its inputs and
# expected values as written; changed: the imports (``from steadyserve import
# serve``; DeploymentConfig, deployment_to_schema and schema_to_deployment from
# steadyserve.serve.deployment, where a deployment's user-set option names and
# its schema, the graph description's options, live).
#
# Each parametrized option test runs 1000 random option combinations, as Ray's.
# ruff: noqa
# mypy: ignore-errors
import itertools
import random
import sys
from typing import Dict, List

import pytest

from steadyserve import serve
from steadyserve.serve.deployment import DeploymentConfig
from steadyserve.serve.deployment import deployment_to_schema, schema_to_deployment


def get_random_dict_combos(d: Dict, n: int) -> List[Dict]:
    """Gets n random combinations of dictionary d.

    Returns:
        List of dictionary combinations of lengths from 0 to len(d). List
        contains n random combinations of d's elements.
    """

    # Shuffle dictionary without modifying original dictionary
    d = dict(random.sample(list(d.items()), len(d)))

    combos = []

    # Sample random combos of random size
    subset_sizes = list(range(len(d) + 1))
    random.shuffle(subset_sizes)

    for subset_size in subset_sizes:
        subset_combo_iterator = map(dict, itertools.combinations(d.items(), subset_size))
        if len(combos) < n:
            subset_combos = list(itertools.islice(subset_combo_iterator, n - len(combos)))
            combos.extend(subset_combos)
        else:
            break

    return combos


class TestGetDictCombos:
    def test_empty(self):
        assert get_random_dict_combos({}, 1) == [{}]

    def test_basic(self):
        d = {"a": 1, "b": 2, "c": 3}
        combos = get_random_dict_combos(d, 8)

        # Sort combos for comparison (sort by length, break ties by value sum)
        combos.sort(key=lambda d: len(d) * 100 + sum(d.values()))

        assert combos == [
            # Dictionaries of length 0
            {},
            # Dictionaries of length 1
            *({"a": 1}, {"b": 2}, {"c": 3}),
            # Dictionaries of length 2
            *({"a": 1, "b": 2}, {"a": 1, "c": 3}, {"b": 2, "c": 3}),
            # Dictionaries of length 3
            {"a": 1, "b": 2, "c": 3},
        ]

    def test_len(self):
        d = {i: i + 1 for i in range(50)}
        assert len(get_random_dict_combos(d, 1000)) == 1000

    def test_randomness(self):
        d = {i: i + 1 for i in range(1000)}
        combo1 = get_random_dict_combos(d, 1000)[0]
        combo2 = get_random_dict_combos(d, 1000)[0]
        assert combo1 != combo2


class TestDeploymentOptions:
    # Deployment options mapped to sample input
    deployment_options = {
        "name": "test",
        "version": "abcd",
        "num_replicas": 1,
        "route_prefix": "/",
        "ray_actor_options": {},
        "user_config": {},
        "max_ongoing_requests": 10,
        "autoscaling_config": None,
        "graceful_shutdown_wait_loop_s": 10,
        "graceful_shutdown_timeout_s": 10,
        "health_check_period_s": 10,
        "health_check_timeout_s": 10,
    }

    deployment_option_combos = get_random_dict_combos(deployment_options, 1000)

    @pytest.mark.parametrize("options", deployment_option_combos)
    def test_user_configured_option_names(self, options: Dict):
        """Check that user_configured_option_names tracks the correct options.

        Args:
            options: Maps deployment option strings (e.g. "name",
                "num_replicas", etc.) to sample inputs. Pairs come from
                TestDeploymentOptions.deployment_options.
        """

        @serve.deployment(**options)
        def f():
            pass

        assert f._deployment_config.user_configured_option_names == set(options.keys())

    @pytest.mark.parametrize("options", deployment_option_combos)
    def test_user_configured_option_names_schematized(self, options: Dict):
        """Check user_configured_option_names after schematization.

        Args:
            options: Maps deployment option strings (e.g. "name",
                "num_replicas", etc.) to sample inputs. Pairs come from
                TestDeploymentOptions.deployment_options.
        """

        # Some options won't be considered user-configured after schematization
        # since the schema doesn't track them.
        untracked_options = ["name", "version", "init_args", "init_kwargs"]

        for option in untracked_options:
            if option in options:
                del options[option]

        @serve.deployment(**options)
        def f():
            pass

        schematized_deployment = deployment_to_schema(f)
        deschematized_deployment = schema_to_deployment(schematized_deployment)

        # Don't track name in the deschematized deployment since it's optional
        # in deployment decorator but required in schema, leading to
        # inconsistent behavior.
        if "name" in deschematized_deployment._deployment_config.user_configured_option_names:
            deschematized_deployment._deployment_config.user_configured_option_names.remove(  # noqa: E501
                "name"
            )

        assert deschematized_deployment._deployment_config.user_configured_option_names == set(
            options.keys()
        )

    @pytest.mark.parametrize("options", deployment_option_combos)
    def test_user_configured_option_names_serialized(self, options: Dict):
        """Check user_configured_option_names after serialization.

        Args:
            options: Maps deployment option strings (e.g. "name",
                "num_replicas", etc.) to sample inputs. Pairs come from
                TestDeploymentOptions.deployment_options.
        """

        # init_kwargs requires independent serialization, so we omit it.
        if "init_kwargs" in options:
            del options["init_kwargs"]

        @serve.deployment(**options)
        def f():
            pass

        serialized_config = f._deployment_config.to_proto_bytes()
        deserialized_config = DeploymentConfig.from_proto_bytes(serialized_config)

        assert deserialized_config.user_configured_option_names == set(options.keys())

    @pytest.mark.parametrize(
        "option",
        [
            "num_replicas",
            "route_prefix",
            "autoscaling_config",
            "user_config",
        ],
    )
    def test_nullable_options(self, option: str):
        """Check that nullable options can be set to None."""

        deployment_options = {option: None}

        # One of "num_replicas" or "autoscaling_config" must be provided.
        if option == "num_replicas":
            deployment_options["autoscaling_config"] = {
                "min_replicas": 1,
                "max_replicas": 5,
                "target_num_ongoing_requests": 5,
            }
        elif option == "autoscaling_config":
            deployment_options["num_replicas"] = 5

        # Deployment should be created without error.
        @serve.deployment(**deployment_options)
        def f():
            pass

    @pytest.mark.parametrize("options", deployment_option_combos)
    def test_options(self, options):
        """Check that updating options also updates user_configured_options_names."""

        @serve.deployment
        def f():
            pass

        f = f.options(**options)
        assert f._deployment_config.user_configured_option_names == set(options.keys())

    def test_eager_placement_group_validation(self):
        """Check that placement groups are validated early.

        Placement group bundles should be validated when the deployment is
        defined, not when it's deployed.
        """

        with pytest.raises(ValueError):

            @serve.deployment(placement_group_bundles=[{"CPU": 0, "GPU": 0}])
            def f():
                pass


if __name__ == "__main__":
    sys.exit(pytest.main(["-v", "-s", __file__]))
