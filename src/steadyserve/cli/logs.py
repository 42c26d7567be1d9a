"""``steady logs``: read (and follow) the log files under STEADY_HOME.

A replica's output goes straight from the process into its log file (the replica
keeps running while the controller restarts, so nothing sits in between), so the
file does not record when a line was written. ``--timestamps`` therefore stamps
what it can honestly date: lines that arrive while following, with the time they
were read. Lines already in the file are shown unstamped (``-`` in place of the
time; ``null`` in ``--json``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from steadyserve.cli.tables import Clock
from steadyserve.client.contracts import iso_utc
from steadyserve.controller.replica_logs import rotated

FOLLOW_POLL_S = 0.2


class ShowOptions(NamedTuple):
    """How a log is shown: ``steady logs``' options, shared by ``jobs pool logs``."""

    tail: int | None
    follow: bool
    timestamps: bool = False
    as_json: bool = False
    utc: bool = False


UNKNOWN_TIME = "-"


class LineWriter:
    """Writes log lines as they are (the default), stamped, or as JSON lines."""

    def __init__(
        self,
        out: BinaryIO,
        source: str,
        *,
        timestamps: bool = False,
        as_json: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.out = out
        self.source = source
        self.timestamps = timestamps
        self.as_json = as_json
        self.clock = clock or Clock()

    @property
    def raw(self) -> bool:
        return not (self.timestamps or self.as_json)

    def write(self, data: bytes, arrived: float | None) -> None:
        if self.raw:
            self.out.write(data)
        else:
            for line in data.splitlines(keepends=True):
                self.out.write(self._line(line, arrived))
        self.out.flush()

    def _line(self, line: bytes, arrived: float | None) -> bytes:
        text = line.rstrip(b"\r\n").decode("utf-8", errors="replace")
        if self.as_json:
            record = {
                "source": self.source,
                "time": arrived,
                "time_iso": iso_utc(arrived) if arrived is not None else None,
                "line": text,
            }
            return json.dumps(record).encode() + b"\n"
        stamp = self.clock.format(arrived) if arrived is not None else UNKNOWN_TIME
        return f"{stamp} {text}\n".encode()


class AccessWriter(LineWriter):
    """A service's request log (``steady logs NAME --access``): one line a request,
    ``TIME CLIENT METHOD PATH STATUS LATENCY vVERSION/rREPLICA REQUEST_ID "AGENT"``
    (STATUS followed by ``:OUTCOME`` when the response did not complete), or with
    ``--json`` the log's own JSON lines unchanged (docs/observability.md)."""

    @property
    def raw(self) -> bool:
        return self.as_json  # the lines are JSON already

    def _line(self, line: bytes, arrived: float | None) -> bytes:
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut by a full disk: shown as it is
            return line.rstrip(b"\r\n") + b"\n"
        if not isinstance(entry, dict):
            return line.rstrip(b"\r\n") + b"\n"
        moment = entry.get("time")
        when = self.clock.format(moment, millis=True) if isinstance(moment, int | float) else "-"
        served = (
            f"v{entry.get('version')}/r{entry.get('replica')}"
            if entry.get("replica") is not None
            else f"lb:{entry.get('reason') or '-'}"
        )
        agent = entry.get("user_agent")
        outcome = entry.get("outcome")
        cut = f":{outcome}" if outcome and outcome != "completed" else ""
        fields = [
            when,
            str(entry.get("client") or "-"),
            str(entry.get("method") or "-"),
            str(entry.get("path") or "-"),
            f"{entry.get('status')}{cut}",
            f"{entry.get('latency_ms', 0):.1f}ms",
            served,
            str(entry.get("request_id") or "-"),
            "-" if agent is None else json.dumps(agent),
        ]
        return (" ".join(fields) + "\n").encode()


def _complete_lines(handle: BinaryIO, pending: bytearray, whole: bool) -> bytes:
    """What was appended since the last read; with ``whole``, complete lines only
    (a partial last line waits for its end, so a stamp never splits a line)."""
    pending.extend(handle.read(65536))
    end = pending.rfind(b"\n") + 1 if whole else len(pending)
    block = bytes(pending[:end])
    del pending[:end]
    return block


def show(
    path: Path,
    tail: int | None,
    follow: bool,
    stop_when: float | None = None,
    writer: LineWriter | None = None,
    now: Callable[[], float] = time.time,
    until: Callable[[], bool] | None = None,
) -> None:
    """Print the file's tail; with ``follow``, keep printing what is appended
    (until ``until()`` says the writer is done, what it wrote by then printed).

    A rotated log (``path.1``, ``path.2``, ...: replica logs and the access log)
    reads as one: the copies, oldest first, then the file. While following, a
    file truncated in place (a replica log's copy-and-truncate) is read again
    from its start."""
    writer = writer or LineWriter(sys.stdout.buffer, str(path))
    copies = rotated(path)
    with open(path, "rb") as handle:
        if tail is None:
            for copy in copies:
                with contextlib.suppress(FileNotFoundError), open(copy, "rb") as old:
                    writer.write(old.read(), None)
            past = handle.read()
        elif tail > 0:
            with contextlib.ExitStack() as files:
                olds = [files.enter_context(open(c, "rb")) for c in copies if c.exists()]
                past = b"".join(deque(itertools.chain(*olds, handle), maxlen=tail))
        else:
            past = b""
            handle.seek(0, os.SEEK_END)
        if past:
            writer.write(past, None)
        if not follow:
            return
        pending = bytearray()
        while stop_when is None or time.monotonic() < stop_when:
            if os.fstat(handle.fileno()).st_size < handle.tell():  # truncated: rotated
                handle.seek(0)
            block = _complete_lines(handle, pending, whole=not writer.raw)
            if block:
                writer.write(block, now())
            elif until is not None and until():
                block = _complete_lines(handle, pending, whole=False)
                if block:
                    writer.write(block, now())
                return
            else:
                time.sleep(FOLLOW_POLL_S)
