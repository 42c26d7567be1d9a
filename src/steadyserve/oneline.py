"""Small value helpers shared by the spec, the plans and event reasons.

Kept in one place so that "is this a number" and "an exception as one line" mean
the same in a service file's error, a plan's diff and a replica's event.
"""

from __future__ import annotations

MAX_REASON_CHARS = 500


def is_number(value: object) -> bool:
    """An int or float that is not a bool (YAML's ``true`` is not a count)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def one_line(exc: BaseException) -> str:
    """An exception as one line of at most 500 characters, for an event's reason
    or an error body: its type, then its message with whitespace folded."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line[:MAX_REASON_CHARS]
