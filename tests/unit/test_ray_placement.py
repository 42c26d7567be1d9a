"""The Ray backend's placement: service-file resources -> actor options, and
refusing what no node can ever hold (pure; no Ray needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.backends.ray_placement import GIB, Placement, placement_of, unsatisfiable
from steadyserve.spec import Resources


def test_defaults_are_one_cpu_like_a_ray_actor() -> None:
    placement = placement_of(Resources())
    assert placement.actor_options() == {"num_cpus": 1.0}
    assert placement.describe() == "Ray(cpus=1)"


def test_skypilot_spellings_map_to_ray_options() -> None:
    placement = placement_of(Resources(cpus="4+", memory="512MB", accelerators="T4:1"))
    assert placement.actor_options() == {
        "num_cpus": 4.0,
        "num_gpus": 1.0,
        "memory": 512 * 1024 * 1024,
        "resources": {"accelerator_type:T4": 0.001},
    }
    assert placement.describe() == "Ray(cpus=4, gpus=T4:1, memory=0.5GiB)"


def test_first_accelerator_choice_is_used() -> None:
    placement = placement_of(Resources(accelerators=["A100:8", "H100:8"]))
    assert placement.num_gpus == 8 and placement.accelerator == "A100"


def test_a100_on_a_cpu_cluster_is_refused_with_what_is_missing() -> None:
    need = placement_of(Resources(accelerators="A100:8")).needs()
    nodes = [{"CPU": 8.0, "memory": 4.0 * GIB}, {"CPU": 8.0}]
    assert unsatisfiable(need, nodes) == "needs GPU 8, the most any node has is 0"


def test_memory_message_is_in_gib() -> None:
    need = Placement(memory=64 * GIB).needs()
    assert unsatisfiable(need, [{"CPU": 2.0, "memory": 8.0 * GIB}]) == (
        "needs memory 64 GiB, the most any node has is 8 GiB"
    )


def test_resources_spread_over_two_nodes_do_not_fit_one_replica() -> None:
    need = {"CPU": 2.0, "GPU": 1.0}
    nodes = [{"CPU": 4.0}, {"CPU": 1.0, "GPU": 1.0}]
    message = unsatisfiable(need, nodes)
    assert message is not None and message.startswith("no single node has all of")


def test_no_alive_node() -> None:
    assert unsatisfiable({"CPU": 1.0}, []) == "the Ray cluster has no alive node"


@given(
    need=st.dictionaries(st.sampled_from(["CPU", "GPU", "memory", "x"]), st.floats(0.01, 16)),
    nodes=st.lists(
        st.dictionaries(st.sampled_from(["CPU", "GPU", "memory", "x"]), st.floats(0, 16)),
        max_size=4,
    ),
)
def test_refused_exactly_when_no_node_covers_every_need(
    need: dict[str, float], nodes: list[dict[str, float]]
) -> None:
    fits = any(all(n.get(k, 0.0) >= v for k, v in need.items()) for n in nodes)
    assert (unsatisfiable(need, nodes) is None) == fits


@pytest.mark.parametrize("name", ["tpu-v4-8", "TPU"])
def test_tpus_are_a_custom_resource_not_gpus(name: str) -> None:
    placement = placement_of(Resources(accelerators=f"{name}:4"))
    assert placement.num_gpus == 0 and placement.resources == {"TPU": 4.0}
