"""The peers' deploy-file formats in one registry, and the one loader that reads a
deploy file once and asks them.

Each format says whether a document is its own (``detect``) and what services it
stands for (``translate``, into a :class:`~steadyserve.spec.fleet.Fleet`). A
document no peer claims is SteadyServe's own fleet file. A new peer format is one
module with those two functions and one line in :data:`PEER_FORMATS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steadyserve.compat import ray_serve
from steadyserve.spec.errors import SpecError
from steadyserve.spec.fleet import Fleet, parse_fleet
from steadyserve.spec.loading import read_document


@dataclass(frozen=True)
class PeerFormat:
    """One peer's deploy file: how to recognise it, and how to translate it."""

    name: str
    detect: Callable[[object], bool]
    translate: Callable[[Mapping[str, Any], Path], Fleet]


PEER_FORMATS: dict[str, PeerFormat] = {
    "ray_serve": PeerFormat("ray_serve", ray_serve.is_ray_config, ray_serve.translate),
}


def detect(data: object) -> PeerFormat | None:
    """The peer format a parsed document is written in; None for SteadyServe's own."""
    return next((f for f in PEER_FORMATS.values() if f.detect(data)), None)


def translate(data: object, base_dir: Path) -> Fleet:
    """The fleet a parsed deploy document stands for, whichever format it is in."""
    peer = detect(data)
    if peer is None:
        return parse_fleet(data, base_dir)
    assert isinstance(data, Mapping)
    return peer.translate(data, base_dir)


def load_deploy_file(path: str | Path) -> Fleet:
    """What ``steady deploy FILE`` sends: a fleet file (``services:``, optional
    ``gateway: {port: N}``) or a peer's deploy file (a Ray Serve config,
    ``applications:``), read once. Every mistake names the file."""
    data = read_document(path)
    try:
        return translate(data, Path(path).absolute().parent)
    except SpecError as exc:
        raise exc.in_file(str(path)) from None
