"""The repository documents its own contract, and only points at itself.

docs/design.md is the service file reference users read: a field that the spec
models accept but the reference does not name is a field nobody can find. And a
link or comment that points outside the repository is broken for every reader
who has only the repository.
"""

from __future__ import annotations

import re
import subprocess
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from steadyserve.spec import ServiceSpec

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "design.md"

# Built at run time so that this file does not match its own patterns: the
# machine-local notes this project started from, and any link to them.
_NOTES = "design".upper()
_OUTSIDE_POINTERS = ("../" + "shared", "shared/" + _NOTES, _NOTES + ".md")
_NOTES_WORD = re.compile(rf"\b{_NOTES}\b")


def _models_in(annotation: object) -> Iterator[tuple[type[BaseModel], bool]]:
    """The spec models inside a field's type, each with whether it is a list item."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, False
        return
    origin = typing.get_origin(annotation)
    for arg in typing.get_args(annotation):
        for model, in_list in _models_in(arg):
            yield model, in_list or origin is list


def field_paths(
    model: type[BaseModel], prefix: str = "", seen: tuple[type[BaseModel], ...] = ()
) -> Iterator[str]:
    """Every field path a file can set: ``service.readiness_probe.path``, and
    ``service.canary.steps[].weight`` for fields of list items. A model already on
    the way down (``resources.any_of`` holds more resources) is not walked again."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        for child, in_list in _models_in(info.annotation):
            if child in seen or child is model:
                continue
            yield from field_paths(child, f"{path}{'[]' if in_list else ''}.", (*seen, model))


def test_the_walk_finds_nested_and_list_fields() -> None:
    paths = set(field_paths(ServiceSpec))
    assert "service.readiness_probe.initial_delay_seconds" in paths
    assert "service.replica_policy.target_ongoing_requests" in paths
    assert "service.canary.steps[].weight" in paths
    assert "service.canary.analysis.min_requests" in paths
    assert "resources.any_of" in paths
    assert "run" in paths


def test_every_spec_field_is_in_the_reference() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    # A field is documented by a row of its block's table: ``| `service.replicas` | ...``.
    documented = set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE))
    missing = [path for path in field_paths(ServiceSpec) if path not in documented]
    assert not missing, (
        "fields of the spec models without a row in docs/design.md's service file"
        " reference: " + ", ".join(missing)
    )


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # not a checkout: nothing to check
        pytest.skip(f"git ls-files unavailable: {exc}")
    return [REPO / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_points_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    offenders = []
    for path in _tracked_files():
        if path.resolve() == this or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(p in line for p in _OUTSIDE_POINTERS) or _NOTES_WORD.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "pointers outside the repository:\n" + "\n".join(offenders)
