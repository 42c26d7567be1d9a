"""Small value helpers shared by the spec, the plans and event reasons.

Kept in one place so that "is this a number" and "an exception as one line" mean
the same in a service file's error, a plan's diff and a replica's event.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

MAX_REASON_CHARS = 500
OUTPUT_TAIL_BYTES = 16_384
"""How much of a log file's end ``file_tail`` reads: a few lines, not the file."""


def is_number(value: object) -> bool:
    """An int or float that is not a bool (YAML's ``true`` is not a count)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def one_line(exc: BaseException) -> str:
    """An exception as one line of at most 500 characters, for an event's reason
    or an error body: its type, then its message with whitespace folded."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line[:MAX_REASON_CHARS]


def last_lines(output: str, lines: int = 3, width: int = 400) -> str:
    """The last non-empty lines of a program's output as one line for an event
    (``a | b | c``), cut from the front to ``width`` characters: the end of a
    crash's output names its cause."""
    kept = [line.strip() for line in output.splitlines() if line.strip()][-lines:]
    text = " | ".join(kept) or "no output"
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def file_tail(
    path: Path,
    lines: int = 2,
    width: int = 300,
    hide: Iterable[bytes] = (),
    mask: bytes = b"****",
) -> str:
    """``last_lines`` of a log file, reading only its end, each value in ``hide``
    (a service's secrets) replaced by ``mask``; "no output" when the file is
    missing or empty (a process that died before writing a line)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - OUTPUT_TAIL_BYTES))
            data = handle.read()
    except OSError:
        return "no output"
    for value in hide:
        data = data.replace(value, mask)
    return last_lines(data.decode("utf-8", errors="replace"), lines, width)
