"""What ``steady up``/``update``/``deploy`` check and say before sending a spec,
so a SkyServe task file runs as it is, or fails early with one line.

The CLI calls :func:`preflight` once per service: it returns the notes to print
(which path rule was used, keys not applicable to the backend) and raises a
:class:`SpecError` for what this machine cannot do (resources it does not have,
more replicas than one fixed port can hold). Nothing here talks to the controller.
"""

from __future__ import annotations

import contextlib
import json
import secrets as random_source
import sqlite3
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import BinaryIO

from steadyserve.backends import netns, sandbox
from steadyserve.compat.skypilot import (
    IGNORE_IMAGE_HINT,
    endpoint_port_problem,
    fixed_port_problem,
    image_problems,
    isolation_problem,
    not_applicable_notes,
    sandbox_note,
)
from steadyserve.lb.tls import pair_problem
from steadyserve.spec import ServiceSpec, SpecError
from steadyserve.spec.machine import Machine, resource_problems, this_machine
from steadyserve.spec.ports import isolated

IGNORE_RESOURCES_HINT = "pass --ignore-resources to start it anyway"
_THIS_MACHINE = "\0ask this machine"


def preflight(
    spec: ServiceSpec,
    *,
    ignore_resources: bool = False,
    ignore_image: bool = False,
    machine: Machine | None = None,
    backend: str = "local",
    prefix: str = "",
    no_isolation: str | None = _THIS_MACHINE,
    no_sandbox: str | None = _THIS_MACHINE,
) -> list[str]:
    """Notes for the user, or a SpecError (every problem, one line each).

    ``prefix`` places the fields inside a fleet file (``services[1].``);
    ``no_isolation`` is why there are no network namespaces (None: there are;
    by default this machine is asked, backends/netns.py), ``no_sandbox`` why
    isolated replicas get no sandbox (backends/sandbox.py)."""
    problems: list[tuple[str | None, str]] = []
    no_isolation = netns.unavailable() if no_isolation is _THIS_MACHINE else no_isolation
    if no_sandbox is _THIS_MACHINE:  # asked only where it matters (it runs bwrap once)
        wanted = backend == "local" and no_isolation is None and isolated(spec)
        no_sandbox = sandbox.unavailable() if wanted else None
    for problem in (
        fixed_port_problem(spec, backend, no_isolation),
        isolation_problem(spec, backend, no_isolation),
        endpoint_port_problem(spec),
    ):
        if problem is not None:
            problems.append(_split(prefix, problem))
    tls = spec.service.tls
    broken_tls = pair_problem(tls.keyfile, tls.certfile) if tls is not None else None
    if broken_tls is not None:
        problems.append((f"{prefix}service.tls", broken_tls))
    notes = [f"{prefix}{line}" for line in not_applicable_notes(spec, backend)]
    unsandboxed = sandbox_note(spec, backend, no_isolation, no_sandbox)
    if unsandboxed is not None:
        notes.append(f"{prefix}{unsandboxed}")
    for line in image_problems(spec):
        if ignore_image:
            notes.append(f"{prefix}{line} (--ignore-image: starting anyway)")
        else:
            problems.append(_split(prefix, f"{line}; {IGNORE_IMAGE_HINT}"))
    found = resource_problems(spec, machine or this_machine()) if backend == "local" else []
    if ignore_resources:
        notes.extend(f"{prefix}{line} (--ignore-resources: starting anyway)" for line in found)
    else:
        problems.extend(_split(prefix, f"{line}; {IGNORE_RESOURCES_HINT}") for line in found)
    if problems:
        (path, message), *more = problems
        raise SpecError(path, message, more=more)
    return notes


def _split(prefix: str, line: str) -> tuple[str | None, str]:
    path, _, message = line.partition(": ")
    return f"{prefix}{path}", message


def unique_name(taken: Collection[str]) -> str:
    """SkyServe's name for a service given none: ``sky-service-`` and 4 hex digits."""
    for _ in range(1000):
        name = f"sky-service-{random_source.token_hex(2)}"
        if name not in taken:
            return name
    raise RuntimeError("no free sky-service-xxxx name after 1000 tries")


# ------------------------------------------------------------------ secrets

MASK = b"****"
MIN_MASKED_LEN = 4
"""Shorter values would mask ordinary words and digits; they are left as they are."""


def secret_values(db_path: Path, service: str) -> list[bytes]:
    """Every ``secrets`` value any stored version of ``service`` has, longest first
    (read-only: ``steady logs`` must work while the controller writes)."""
    if not db_path.exists():
        return []
    found: set[bytes] = set()
    with contextlib.suppress(sqlite3.Error):
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT spec_json FROM versions WHERE service = ?", (service,))
            for (spec_json,) in rows:
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    spec = json.loads(spec_json)
                    values = list((spec.get("secrets") or {}).values())
                    values.append((spec.get("service") or {}).get("auth_key"))
                    for value in values:  # secrets, and service.auth_key
                        if isinstance(value, str) and len(value) >= MIN_MASKED_LEN:
                            found.add(value.encode())
        finally:
            db.close()
    return sorted(found, key=len, reverse=True)


class MaskedOutput:
    """A binary stream that writes ``****`` for each secret value. Masking is per
    write; ``steady logs`` writes whole blocks of lines, so a value is split only
    when a replica writes half of it, waits, then the rest."""

    def __init__(self, out: BinaryIO, values: Iterable[bytes]) -> None:
        self._out = out
        self._values = list(values)

    def write(self, data: bytes) -> int:
        for value in self._values:
            data = data.replace(value, MASK)
        return self._out.write(data)

    def flush(self) -> None:
        self._out.flush()
