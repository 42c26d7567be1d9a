"""core/capacity.py on simulated inventories: disjoint devices, honest reasons, room.

No GPU exists on these machines, so every inventory here is a value; the
properties are checked over random inventories and random sequences of admits
and releases (hypothesis).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.core.capacity import (
    Assignment,
    Gpu,
    Insufficient,
    Inventory,
    Request,
    assign,
    room,
    visible,
)


def gpus(*names: str) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, f"GPU-{i:04d}", name, 81920) for i, name in enumerate(names))


EIGHT = Inventory(gpus=gpus(*["NVIDIA A100-SXM4-80GB"] * 8), cores=tuple(range(8)))


def test_four_replicas_of_two_gpus_fill_eight_disjointly_and_a_fifth_is_told_why() -> None:
    taken: list[Assignment] = []
    for _ in range(4):
        got = assign(EIGHT, taken, Request(accelerators=(("A100", 2),)))
        assert isinstance(got, Assignment)
        taken.append(got)
    assert [a.gpus for a in taken] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert taken[1].uuids == ("GPU-0002", "GPU-0003")
    assert taken[0].accelerator == "NVIDIA A100-SXM4-80GB"
    fifth = assign(EIGHT, taken, Request(accelerators=(("A100", 2),)))
    assert isinstance(fifth, Insufficient)
    assert fifth.reason == "Insufficient nvidia.com/gpu: needs A100:2 (A100: 0 of 8 free)"
    assert fifth.missing == ("nvidia.com/gpu",)
    # One stops: the fifth gets exactly the freed pair.
    again = assign(EIGHT, [taken[0], taken[2], taken[3]], Request(accelerators=(("A100", 2),)))
    assert isinstance(again, Assignment) and again.gpus == (2, 3)


def test_alternatives_take_the_first_that_fits_and_names_must_match() -> None:
    mixed = Inventory(gpus=gpus("NVIDIA A100-SXM4-80GB", "Tesla T4", "Tesla T4"))
    either = Request(accelerators=(("H100", 1), ("T4", 2)))
    got = assign(mixed, [], either)
    assert isinstance(got, Assignment) and got.gpus == (1, 2) and got.accelerator == "Tesla T4"
    nothing = assign(mixed, [], Request(accelerators=(("H100", 1),)))
    assert isinstance(nothing, Insufficient)
    assert "H100: 0 of 0 free" in nothing.reason
    # An any_of alternative without accelerators fits with none.
    optional = assign(mixed, [got], Request(accelerators=(("T4", 1), ("", 0))))
    assert isinstance(optional, Assignment) and optional.gpus == ()


def test_no_gpu_at_all_says_so() -> None:
    got = assign(Inventory(), [], Request(accelerators=(("A100", 1),)))
    assert isinstance(got, Insufficient)
    assert got.reason == "Insufficient nvidia.com/gpu: needs A100:1, this machine has no GPU"


def test_cores_and_fixed_ports_are_held_like_gpus() -> None:
    two = Inventory(cores=(0, 1))
    first = assign(two, [], Request(cores=2))
    assert isinstance(first, Assignment) and first.cores == (0, 1)
    second = assign(two, [first], Request(cores=1))
    assert isinstance(second, Insufficient)
    assert second.reason == "Insufficient cpu: 1 cores to pin, 0 of 2 free"
    port = assign(two, [], Request(ports=(8080,)))
    assert isinstance(port, Assignment)
    clash = assign(two, [port], Request(ports=(8080,)))
    assert isinstance(clash, Insufficient)
    assert clash.reason == "Insufficient port: 8080 held by another replica"


def test_assignment_survives_its_row() -> None:
    held = Assignment(gpus=(2, 3), uuids=("GPU-2", "GPU-3"), accelerator="A100", cores=(1,))
    assert Assignment.from_json(held.to_json()) == held
    assert Assignment.from_json(None) is None and Assignment.from_json("") is None


def test_controller_cuda_visible_devices_limits_the_inventory_as_ray_reads_it() -> None:
    assert [g.index for g in visible(EIGHT, "4,5,GPU-0007").gpus] == [4, 5, 7]
    assert visible(EIGHT, "").gpus == ()
    assert visible(EIGHT, None) == EIGHT


requests = st.builds(
    Request,
    accelerators=st.lists(
        st.tuples(st.sampled_from(["A100", "T4"]), st.integers(1, 3)), min_size=1, max_size=2
    ).map(tuple),
    cores=st.integers(0, 2),
)
inventories = st.builds(
    Inventory,
    gpus=st.lists(st.sampled_from(["NVIDIA A100-SXM4-80GB", "Tesla T4"]), max_size=8).map(
        lambda names: gpus(*names)
    ),
    cores=st.integers(0, 6).map(lambda n: tuple(range(n))),
)


@settings(max_examples=300, deadline=None)
@given(
    inventory=inventories,
    steps=st.lists(st.tuples(st.booleans(), requests, st.integers(0, 7)), max_size=30),
)
def test_admits_and_releases_never_share_a_device_or_a_core(
    inventory: Inventory, steps: list[tuple[bool, Request, int]]
) -> None:
    held: list[Assignment] = []
    for admit, request, pick in steps:
        if not admit and held:
            held.pop(pick % len(held))
            continue
        before = room(inventory, held, request, 10)
        got = assign(inventory, held, request)
        assert isinstance(got, Assignment) == (before > 0)
        if isinstance(got, Insufficient):
            assert got.reason.startswith("Insufficient ")
            continue
        held.append(got)
        assert room(inventory, held, request, 10) == before - 1
        devices = [i for a in held for i in a.gpus]
        cores = [c for a in held for c in a.cores]
        assert len(devices) == len(set(devices)) and set(devices) <= {
            g.index for g in inventory.gpus
        }
        assert len(cores) == len(set(cores)) and set(cores) <= set(inventory.cores)
        name = got.accelerator or ""
        assert all(inventory.gpus[i].name == name for i in got.gpus)


def test_ray_assigned_ids_show_in_the_resources_column() -> None:
    from steadyserve.backends.ray_actor import with_gpu_ids

    assert with_gpu_ids("Ray(cpus=1, gpus=T4:1)", ["0"]) == "Ray(cpus=1, gpus=T4:1, ids=0)"
    assert with_gpu_ids("Ray()", ["2", "3"]) == "Ray(ids=2,3)"
    assert with_gpu_ids("Ray(cpus=1)", []) == "Ray(cpus=1)"
