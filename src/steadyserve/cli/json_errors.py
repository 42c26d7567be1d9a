"""An error under ``--json``: one JSON object on stdout, so a script reads it where
it reads every answer, with the same exit code as without ``--json``.

``{"error": true, "kind", "message", "field", "file", "exit_code", "errors"}``:
``kind`` is ``bad_input`` (exit 2: a file, an argument, an unknown service; nothing
changed), ``usage`` (exit 2: the command line itself, click's parse errors) or
``failure`` (exit 1); ``field`` is the field or option path the message names
(``service.replicas``, ``--to``), or null; ``errors`` lists every mistake of a
file (``{field, message}`` each), the first being the top-level one. The object
is one line, so it also ends a stream of JSON lines (``--wait``, ``--follow``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from steadyserve.client.connection import CommandError
from steadyserve.spec import SpecError

_STEP = r"[a-z_][a-z0-9_]*(?:\[\d+\])?"
_FIELD = re.compile(rf"^(--[a-z][a-z0-9-]*|{_STEP}(?:\.{_STEP})*): ")
"""A message that starts with a field or option path and a colon (``service.port: ...``,
``--to: ...``): the path is the field. Plain words never match (they hold spaces)."""


def _kind(exit_code: int) -> str:
    return "bad_input" if exit_code == 2 else "failure"


def error_object(
    message: str,
    exit_code: int,
    *,
    kind: str | None = None,
    field: str | None = None,
    file: str | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    if field is None and (match := _FIELD.match(message)) is not None:
        field, message = match.group(1), message[match.end() :]
    first = {"field": field, "message": message}
    return {
        "error": True,
        "kind": kind or _kind(exit_code),
        "message": message,
        "field": field,
        "file": file,
        "exit_code": exit_code,
        "errors": errors if errors is not None else [first],
    }


def from_spec_error(exc: SpecError) -> dict[str, Any]:
    mistakes = [{"field": path, "message": message} for path, message in exc.all()]
    return error_object(exc.message, 2, field=exc.path, file=exc.file, errors=mistakes)


def from_command_error(exc: CommandError) -> dict[str, Any]:
    return error_object(str(exc), exc.exit_code)


def from_click(exc: click.ClickException) -> dict[str, Any]:
    """click's own errors: a missing argument, an unknown option, a bad value."""
    param = getattr(exc, "param", None)
    field = None
    if param is not None:
        opts = getattr(param, "opts", None) or []
        field = opts[0] if isinstance(param, click.Option) and opts else param.name
    return error_object(exc.format_message(), exc.exit_code, kind="usage", field=field)


def dumps(error: dict[str, Any]) -> str:
    return json.dumps(error)
