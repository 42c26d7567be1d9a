"""SkyServe keys named, refused or checked before anything starts: ``image_id``,
``controller_resources``, ``config``, ``pool`` (SkyPilot's two spellings), and a TLS pair
that must match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.helpers.certs import make_pair

from steadyserve.compat.skypilot import not_applicable_notes
from steadyserve.compat.skyserve import preflight
from steadyserve.spec import SpecError, parse_service
from steadyserve.spec.machine import Machine

MACHINE = Machine(cpus=64, memory_gb=256.0, gpus=())


def _parse(data: dict[str, Any], tmp: Path) -> Any:
    return parse_service(data, base_dir=tmp)


def _lines(exc: pytest.ExceptionInfo[SpecError]) -> list[str]:
    return list(exc.value.lines())


def test_image_id_is_refused_unless_ignore_image(tmp_path: Path) -> None:
    spec = _parse({"run": "x", "resources": {"image_id": "docker:vllm/vllm-openai"}}, tmp_path)
    with pytest.raises(SpecError) as refused:
        preflight(spec, machine=MACHINE)
    assert _lines(refused) == [
        "resources.image_id: docker:vllm/vllm-openai is an image replicas would run in; here"
        " they run on this machine's host, without it; pass --ignore-image to run it on the"
        " host anyway"
    ]
    notes = preflight(spec, ignore_image=True, machine=MACHINE)
    assert notes == [
        "resources.image_id: docker:vllm/vllm-openai is an image replicas would run in; here"
        " they run on this machine's host, without it (--ignore-image: starting anyway)"
    ]
    assert not any(n.startswith("resources.image_id: not applicable") for n in notes)


def test_image_id_inside_any_of_is_named_by_its_place(tmp_path: Path) -> None:
    spec = _parse(
        {"run": "x", "resources": {"any_of": [{"cpus": 1}, {"image_id": "docker:x"}]}}, tmp_path
    )
    with pytest.raises(SpecError) as refused:
        preflight(spec, machine=MACHINE)
    assert _lines(refused)[0].startswith("resources.any_of[1].image_id: docker:x is an image")


def test_controller_resources_and_config_are_named_and_never_stored(tmp_path: Path) -> None:
    spec = _parse(
        {
            "run": "x",
            "config": {"docker": {"run_options": ["--cap-add=SYS_ADMIN"]}},
            "service": {"controller_resources": {"cpus": "4+", "disk_size": 100}},
        },
        tmp_path,
    )
    assert not_applicable_notes(spec) == [
        "service.controller_resources: not applicable to the local backend (the controller is"
        " a process on this machine, not a VM); ignored",
        "config: not applicable to the local backend (SkyPilot's own settings for docker); ignored",
    ]
    plain = _parse({"run": "x"}, tmp_path)
    assert spec.spec_json() == plain.spec_json()  # changing them is never an update


def test_a_top_level_pool_is_the_service_sections_pool(tmp_path: Path) -> None:
    """SkyPilot's pool file (``pool:`` at the top, ``setup``, no ``run``) is the same
    spec as SkyPilot's service section with ``pool:`` and ``workers`` beside it."""
    top = _parse({"setup": "echo ready", "pool": {"workers": 2}}, tmp_path)
    inside = _parse({"setup": "echo ready", "service": {"pool": {}, "workers": 2}}, tmp_path)
    assert top.service.pool is not None and top.service.pool.workers == 2
    assert top.service.replicas == 2 and top.replica_kind == "worker"
    assert top.spec_json() == inside.spec_json()


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"run": "x", "pool": {"workers": 2}},
            "run: a pool's workers run no command of their own: jobs bring theirs"
            " (steady jobs launch --pool NAME job.yaml)",
        ),
        (
            {"pool": {"workers": 2}, "service": {"pool": {"workers": 3}}},
            "(top level): pool is given twice, at the top and as service.pool: keep one",
        ),
        (
            {"pool": {"workers": 2}, "service": {"replicas": 3}},
            "service: replicas does not apply to a pool (size it with pool.workers, or"
            " pool.min_workers and pool.max_workers)",
        ),
        ({"pool": {"workers": -1}}, "service.pool.workers: must be an integer >= 0"),
        (
            {"pool": {"workers": 1}, "resources": {"accelerators": {"L4": None, "A10G": None}}},
            "resources: accelerators A10G, L4: Heterogeneous clusters are not supported for"
            " pools (give one accelerator for all workers)",
        ),
    ],
)
def test_a_bad_pool_is_refused_in_one_line(data: dict[str, Any], line: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as refused:
        _parse(data, tmp_path)
    assert _lines(refused) == [line]


def test_a_key_that_does_not_match_its_certificate_is_refused(tmp_path: Path) -> None:
    key_a, cert_a = make_pair(tmp_path, "a")
    key_b, _ = make_pair(tmp_path, "b")
    good = _parse(
        {"run": "x", "service": {"tls": {"keyfile": str(key_a), "certfile": str(cert_a)}}},
        tmp_path,
    )
    assert preflight(good, machine=MACHINE) == []
    bad = _parse(
        {"run": "x", "service": {"tls": {"keyfile": str(key_b), "certfile": str(cert_a)}}},
        tmp_path,
    )
    with pytest.raises(SpecError) as refused:
        preflight(bad, machine=MACHINE)
    assert _lines(refused) == [
        f"service.tls: certfile {cert_a} and keyfile {key_b}: the key does not match the"
        " certificate"
    ]


def test_files_that_are_not_pem_are_refused_naming_both(tmp_path: Path) -> None:
    (tmp_path / "k.pem").write_text("not a key")
    (tmp_path / "c.pem").write_text("not a certificate")
    spec = _parse(
        {"run": "x", "service": {"tls": {"keyfile": "k.pem", "certfile": "c.pem"}}}, tmp_path
    )
    with pytest.raises(SpecError) as refused:
        preflight(spec, machine=MACHINE)
    (line,) = _lines(refused)
    assert line.startswith(
        f"service.tls: certfile {tmp_path / 'c.pem'} and keyfile {tmp_path / 'k.pem'}: they do"
        " not load as a PEM certificate and key"
    )


def test_a_pool_may_name_one_accelerator_and_a_service_several(tmp_path: Path) -> None:
    """Only a pool's workers must all get the same accelerator: a service's
    replicas may take any of several, as SkyServe's do."""
    pool = _parse({"pool": {"workers": 1}, "resources": {"accelerators": "L4:1"}}, tmp_path)
    assert pool.resources.accelerator_choices() == [("L4", 1.0)]
    choices = {"L4": None, "A10G": None}
    service = _parse({"run": "x", "resources": {"accelerators": choices}}, tmp_path)
    assert [name for name, _ in service.resources.accelerator_choices()] == ["L4", "A10G"]
