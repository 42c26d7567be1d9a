"""What a version's environment gets of the controller's packages: SteadyServe and
the packages it needs, really installed in the venv, and nothing else.

A Python replica runs SteadyServe's runner inside the version's venv, so the venv
must import SteadyServe and its dependencies. Exposing the controller's whole
``site-packages`` (as a ``.pth`` would) leaks: ``pip install X`` then answers
"already satisfied" from the controller's copy and installs nothing, and the
replica imports packages the version never asked for. Instead every file of
SteadyServe's dependency closure (by each distribution's ``RECORD``) is hard
linked into the venv's own ``site-packages`` (copied across file systems),
dist-info included: pip and uv see exactly what the venv really holds, and the
version's ``pip:`` and ``setup`` install after it, so their pins replace
SteadyServe's copies. :func:`unmet` then names, in one line, any requirement
of SteadyServe's that the version's pins broke.

The controller's ``pip`` is linked in too when it has one, so ``pip`` and
``python -m pip`` inside ``setup`` install into the venv.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as metadata
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - packaging ships with nearly every venv
    Requirement = None  # type: ignore[assignment,misc]

ROOT = "steadyserve"
HELPERS = ("pip",)
"""Linked in when the controller has them (not dependencies: tools ``setup`` uses)."""
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """A distribution's normalized name (PEP 503): ``PyYAML`` -> ``pyyaml``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Needed:
    """One requirement edge: ``owner`` requires ``text`` (a PEP 508 string)."""

    owner: str
    name: str
    text: str


def requirements(dist: metadata.Distribution) -> list[Needed]:
    """The requirements of ``dist`` that apply here (no extras, markers true)."""
    owner = canonical(dist.metadata["Name"] or "")
    found = []
    for text in dist.requires or []:
        if Requirement is not None:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            found.append(Needed(owner, canonical(req.name), text))
            continue
        match = _NAME.match(text)
        if match and "extra" not in text.partition(";")[2]:
            found.append(Needed(owner, canonical(match.group(1)), text))
    return found


Lookup = Callable[[str], "metadata.Distribution | None"]


def closure(lookup: Lookup, root: str = ROOT) -> list[metadata.Distribution]:
    """``root`` and every distribution it needs, transitively, as ``lookup`` finds
    them (a missing one is skipped: :func:`unmet` reports it)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [canonical(root)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        dist = lookup(name)
        if dist is None:
            continue
        seen[name] = dist
        todo.extend(n.name for n in requirements(dist))
    return [seen[name] for name in sorted(seen)]


def controller_lookup(name: str) -> metadata.Distribution | None:
    """A distribution as the controller's interpreter imports it."""
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def site_lookup(site: Path) -> Lookup:
    """Distributions installed in one ``site-packages`` folder only."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=[str(site)]):
        found.setdefault(canonical(dist.metadata["Name"] or ""), dist)
    return found.get


def lent() -> list[metadata.Distribution]:
    """What the controller lends every environment: SteadyServe's closure and pip."""
    dists = closure(controller_lookup)
    names = {canonical(d.metadata["Name"] or "") for d in dists}
    for helper in HELPERS:
        dist = controller_lookup(helper)
        if dist is not None and helper not in names:
            dists.append(dist)
    return dists


def identity(dists: Iterable[metadata.Distribution]) -> list[str]:
    """``name==version`` of each lent distribution: part of an environment's key,
    so upgrading the controller's packages builds environments afresh."""
    return sorted(f"{canonical(d.metadata['Name'] or '')}=={d.version}" for d in dists)


def link_in(dists: Iterable[metadata.Distribution], site: Path) -> int:
    """Hard link (or copy) every file of ``dists`` that lives in their
    ``site-packages`` into ``site``; return how many. Scripts (``../../bin``) are
    left out: their ``#!`` names the controller's interpreter."""
    count = 0
    made: set[Path] = set()
    for dist in dists:
        for entry in dist.files or []:
            if entry.parts and entry.parts[0] == "..":
                continue
            source = Path(str(dist.locate_file(entry)))
            target = site / Path(*entry.parts)
            if not source.is_file() or target.exists():
                continue
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            try:
                os.link(source, target)
            except OSError:
                with contextlib.suppress(OSError):
                    shutil.copy2(source, target)
            count += 1
    return count


def unmet(site: Path) -> list[str]:
    """Requirements of SteadyServe's closure, as installed in ``site``, that the
    versions installed there do not meet: what a version's pins broke."""
    if Requirement is None:
        return []
    lookup = site_lookup(site)
    found = []
    for dist in closure(lookup):
        for need in requirements(dist):
            have = lookup(need.name)
            req = Requirement(need.text)
            if have is None:
                found.append(f"{need.owner} needs {req}, the environment has no {req.name}")
                continue
            with contextlib.suppress(InvalidVersion):
                if not req.specifier.contains(Version(have.version), prereleases=True):
                    found.append(
                        f"{need.owner} needs {req}, the environment has {req.name} {have.version}"
                    )
    return found


def conflict_line(problems: list[str]) -> str | None:
    """The one line a build reports when the version's pins win over SteadyServe's."""
    if not problems:
        return None
    return "the version's packages win over SteadyServe's: " + "; ".join(problems)
