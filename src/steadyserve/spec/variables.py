"""SkyPilot's task variables: ``--env``/``--secret`` and ``$KEY`` in a file.

``sky serve up --env KEY=VALUE --secret KEY=VALUE`` sets (or overrides) the
file's ``envs`` and ``secrets``; an entry of ``envs`` left null must be given so
(by ``--secret``, it is a secret).
SkyPilot then fills ``$KEY`` and ``${KEY}`` in the ``service`` section and in
``file_mounts`` with those values (its ``_fill_in_env_vars``), which is how a
file names its TLS files or its probe's model (``tls: {keyfile:
$TLS_KEYFILE_ENV_VAR}``). This module does both to the document as read, before
it is validated, so the spec stored is the filled one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from steadyserve.spec.errors import SpecError

_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$", re.DOTALL)
FILLED_SECTIONS = ("service", "file_mounts")
"""Where SkyPilot fills ``$KEY``; ``run`` and ``setup`` get the variables from bash."""


def cli_values(items: Sequence[str], option: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``--env KEY=VALUE`` items as a mapping; a bare ``KEY`` takes its value from
    ``environ`` (SkyPilot's ``--env KEY``), and an unset one is refused."""
    found: dict[str, str] = {}
    for item in items:
        match = _ASSIGNMENT.match(item)
        if match is None:
            raise SpecError(option, f"{item[:40]!r}: expected KEY=VALUE or KEY")
        key, value = match.group(1), match.group(2)
        if value is None:
            value = environ.get(key)
            if value is None:
                raise SpecError(option, f"{key}: not set here; pass {option} {key}=VALUE")
        found[key] = value
    return found


def with_task_values(
    data: dict[str, Any], envs: Mapping[str, str], secrets: Mapping[str, str]
) -> dict[str, Any]:
    """The document with ``--env``/``--secret`` merged into ``envs``/``secrets``
    and ``$KEY`` filled in :data:`FILLED_SECTIONS`. An ``envs`` entry still null
    is refused here, naming the option that gives it."""
    out = dict(data)
    for field, given in (("envs", envs), ("secrets", secrets)):
        section = out.get(field)
        if given and (section is None or isinstance(section, dict)):
            out[field] = {**(section or {}), **given}
    file_envs = out.get("envs")
    if isinstance(file_envs, dict):
        # A null entry given with --secret is a secret: never shown, not an env too.
        file_envs = {k: v for k, v in file_envs.items() if not (v is None and k in secrets)}
        out["envs"] = file_envs
        for key, value in file_envs.items():
            if value is None:
                raise SpecError(
                    f"envs.{key}", f"no value: pass --env {key}=VALUE (or --secret), or set it"
                )
    values: dict[str, str] = {}
    for field in ("envs", "secrets"):
        section = out.get(field)
        if isinstance(section, dict):
            values.update(
                {str(k): _text(v) for k, v in section.items() if v is not None and str(k)}
            )
    if values:
        for field in FILLED_SECTIONS:
            if field in out:
                out[field] = fill_in(out[field], values)
    return out


def fill_in(node: Any, values: Mapping[str, str]) -> Any:
    """``$KEY`` and ``${KEY}`` in every string of ``node`` (keys of mappings too)
    replaced by ``values[KEY]``; a ``$NAME`` that is not a known key stays as it is."""
    names = "|".join(re.escape(k) for k in sorted(values, key=len, reverse=True))
    pattern = re.compile(rf"\$\{{({names})\}}|\$({names})(?![A-Za-z0-9_])")

    def fill(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(lambda m: values[m.group(1) or m.group(2)], item)
        if isinstance(item, dict):
            return {fill(k): fill(v) for k, v in item.items()}
        if isinstance(item, list):
            return [fill(v) for v in item]
        return item

    return fill(node)


def _text(value: Any) -> str:
    """A value as bash would see it in the replica's environment."""
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)
