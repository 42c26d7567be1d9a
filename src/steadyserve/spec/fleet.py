"""A fleet: the services one deploy sends, as SteadyServe's own fleet file writes them
(``services: [...]``, optional ``gateway: {port: N}``), and the shape every peer's
deploy file (a Ray Serve config) is translated into (compat/formats.py)."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadyserve.spec.convert import _format_loc
from steadyserve.spec.errors import SpecError
from steadyserve.spec.loading import kind_of, parse_service
from steadyserve.spec.models import ServiceSpec


@dataclass
class Fleet:
    """A deploy file read: what ``steady deploy`` sends."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    """One service document per service (before validation: the CLI merges
    decorator defaults under them)."""
    specs: list[ServiceSpec] = field(default_factory=list)
    gateway_port: int | None = None
    """None: no gateway (a fleet file without ``gateway:``)."""
    gateway_named: bool = True
    """The file names the port (``gateway: {port}``, ``http_options.port``): taken as
    named; else a peer's default (Ray's 8000), which ``STEADY_PORTS`` replaces with
    a port of its range."""
    gateway_timeout: float | None = None
    """Ray's ``http_options.request_timeout_s``: the gateway answers 408 past it (None:
    the gateway keeps the one it has)."""
    notices: list[str] = field(default_factory=list)
    access_log: bool | None = None
    """A peer's file-wide access-log switch, for services that do not set their own."""
    scope: str = "all"
    """What a deploy may take down: ``all`` (a fleet file is the whole desired state)
    or ``applications`` (only the services a Ray Serve config made)."""


def parse_fleet(data: object, base_dir: Path) -> Fleet:
    """A fleet file's document, validated: every item a named service, no name twice,
    and a gateway port when a service has a route prefix. Every mistake of the items
    is reported at once, as one SpecError."""
    if not isinstance(data, dict):
        raise SpecError(
            None, f"file must contain a mapping with services: [...], not {kind_of(data)}"
        )
    for key in data:
        if key not in ("services", "gateway"):
            hint = (
                " (did you mean services?)"
                if difflib.get_close_matches(str(key), ["services"])
                else ""
            )
            raise SpecError(_format_loc([str(key)]), f"unknown field{hint}")
    items = data.get("services")
    if items is None:
        raise SpecError("services", "required (a list of services)")
    if not isinstance(items, list):
        raise SpecError("services", "must be a list of services")
    if not items:
        raise SpecError("services", "must not be empty")
    specs: list[ServiceSpec] = []
    first_index: dict[str, int] = {}
    mistakes: list[SpecError] = []  # every item is checked: all mistakes in one report
    for index, item in enumerate(items):
        where = f"services[{index}]"
        if not isinstance(item, dict):
            mistakes.append(
                SpecError(where, f"must be a mapping of service fields, not {kind_of(item)}")
            )
            continue
        if item.get("name") is None:
            mistakes.append(
                SpecError(f"{where}.name", "required (every service in a fleet file needs a name)")
            )
        try:
            spec = parse_service(item, base_dir=base_dir, environ=os.environ)
        except SpecError as exc:
            mistakes.append(exc.under(where))
            continue
        if spec.name is None:
            continue
        if spec.name in first_index:
            mistakes.append(
                SpecError(
                    f"{where}.name",
                    f"duplicate service name {spec.name!r} "
                    f"(also services[{first_index[spec.name]}])",
                )
            )
        first_index[spec.name] = index
        specs.append(spec)
    if mistakes:
        raise SpecError.combine(mistakes)
    return Fleet(documents=list(items), specs=specs, gateway_port=_gateway_port(data, specs))


def _gateway_port(data: dict[str, Any], specs: list[ServiceSpec]) -> int | None:
    gateway = data.get("gateway")
    if gateway is None:
        if any(spec.service.route_prefix is not None for spec in specs):
            raise SpecError(
                "gateway", "required when a service has service.route_prefix (gateway: {port: N})"
            )
        return None
    port = gateway.get("port") if isinstance(gateway, dict) else None
    extra = [k for k in gateway if k != "port"] if isinstance(gateway, dict) else []
    if extra:
        raise SpecError(f"gateway.{extra[0]}", "unknown field (gateway has port only)")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise SpecError("gateway.port", "must be a port, 1 to 65535")
    return port
