"""A fleet file's services, read the one way ``steady deploy`` reads a deploy file
(compat/formats.py: the file read once, then SteadyServe's own format or a peer's)."""

from __future__ import annotations

from pathlib import Path

from steadyserve.compat.formats import load_deploy_file
from steadyserve.spec import ServiceSpec


def load_fleet_file(path: str | Path) -> list[ServiceSpec]:
    return load_deploy_file(path).specs
