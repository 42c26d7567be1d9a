"""The one error type of spec loading: a user's mistake, phrased as one line."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic_core import PydanticCustomError

NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
"""Service names: they appear in URLs, file paths and process titles, so keep them plain."""

MAX_FILE_BYTES = 1 << 20
"""A service file is a few hundred bytes; anything past 1 MiB is a wrong path, not a spec."""

TOP_LEVEL = "(top level)"


_NAME_RULE = (
    "use 1-63 lowercase letters, digits, '-' or '_', starting and ending with a letter or digit"
)


# --------------------------------------------------------------------------- errors


class SpecError(ValueError):
    """A user mistake in a service or fleet file, phrased for the user.

    ``str()`` is always one line, ``"{file}: {path}: {message}"`` with the parts
    that are known, so the CLI can print it without a traceback. ``path`` is the
    dotted field path (``service.replicas``, ``services[1].run``), ``(top level)``
    for the whole document, or None for problems with the file itself.
    """

    def __init__(
        self,
        path: str | None,
        message: str,
        *,
        file: str | None = None,
        more: Sequence[tuple[str | None, str]] = (),
    ) -> None:
        self.path = path
        self.message = message
        self.file = file
        self.more = tuple(more)
        """Further mistakes of the same file, (path, message) each: ``str()`` stays
        the first one, :meth:`lines` has them all."""
        super().__init__(str(self))

    def lines(self) -> list[str]:
        """Every mistake found, one line each, ``"{file}: {path}: {message}"``."""
        rest = [str(SpecError(path, message, file=self.file)) for path, message in self.more]
        return [str(self), *rest]

    def all(self) -> list[tuple[str | None, str]]:
        return [(self.path, self.message), *self.more]

    @staticmethod
    def combine(errors: Sequence[SpecError], file: str | None = None) -> SpecError:
        """One error carrying every mistake of ``errors`` (in order, duplicates once)."""
        found: list[tuple[str | None, str]] = []
        for error in errors:
            found.extend(item for item in error.all() if item not in found)
        (path, message), *more = found
        return SpecError(path, message, file=file, more=more)

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.path) if p]
        return " ".join(": ".join([*parts, self.message]).splitlines())

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle through self.args by default, which does not match __init__.
        return (
            SpecError,
            (self.path, self.message),
            {"file": self.file, "more": self.more},
        )

    def in_file(self, file: str) -> SpecError:
        """The same error, prefixed with the file it came from."""
        return SpecError(self.path, self.message, file=file, more=self.more)

    def under(self, prefix: str) -> SpecError:
        """The same error for a document nested at ``prefix`` (a fleet file's item)."""

        def nested(path: str | None) -> str:
            return prefix if path in (None, TOP_LEVEL) else f"{prefix}.{path}"

        more = [(nested(path), message) for path, message in self.more]
        return SpecError(nested(self.path), self.message, file=self.file, more=more)


def _fail(message: str, **context: object) -> PydanticCustomError:
    """An error pydantic reports with our message verbatim (``{x}`` filled from context)."""
    return PydanticCustomError("spec", message, context or None)
