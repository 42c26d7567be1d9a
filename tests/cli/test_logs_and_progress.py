"""`steady logs` stamping and JSON lines, and `--wait` progress written to a pipe."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

from rich.console import Console

from steadyserve.cli.common import Progress
from steadyserve.cli.logs import LineWriter, show
from steadyserve.cli.tables import Clock

ARRIVED = 1_796_074_985.0  # 2026-11-30T21:43:05Z


def follow(path: Path, writer: LineWriter, appended: list[bytes]) -> None:
    """Follow ``path`` while a thread appends ``appended``; stop once all is shown."""

    def append() -> None:
        time.sleep(0.3)
        with open(path, "ab") as handle:
            for chunk in appended:
                handle.write(chunk)
                handle.flush()
                time.sleep(0.3)

    writer_thread = threading.Thread(target=append)
    writer_thread.start()
    show(path, None, True, stop_when=time.monotonic() + 3, writer=writer, now=lambda: ARRIVED)
    writer_thread.join(timeout=10)


def test_timestamps_stamp_lines_that_arrive_and_mark_older_ones(tmp_path: Path) -> None:
    path = tmp_path / "1.log"
    path.write_bytes(b"old line\n")
    out = io.BytesIO()
    writer = LineWriter(out, str(path), timestamps=True, clock=Clock(utc=True, now=ARRIVED))
    follow(path, writer, [b"new one\nhalf ", b"a line\n"])
    assert out.getvalue().decode().splitlines() == [
        "- old line",
        "21:43:05Z new one",
        "21:43:05Z half a line",  # a line written in two parts is stamped once, whole
    ]


def test_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "1.log"
    path.write_bytes(b"old line\n")
    out = io.BytesIO()
    follow(path, LineWriter(out, str(path), as_json=True), [b"new one\n"])
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert records == [
        {"source": str(path), "time": None, "time_iso": None, "line": "old line"},
        {
            "source": str(path),
            "time": ARRIVED,
            "time_iso": "2026-11-30T21:43:05.000Z",
            "line": "new one",
        },
    ]


def test_progress_when_piped_is_one_plain_line_per_change() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with Progress(console, "updating web") as progress:
        for line in ["web: 0/2 ready", "web: 0/2 ready", "web: 1/2 ready", "web: 1/2 ready"]:
            progress.show(line)
    console.print("web: update to version 2 SUCCEEDED")
    assert out.getvalue().splitlines() == [
        "web: 0/2 ready",
        "web: 1/2 ready",
        "web: update to version 2 SUCCEEDED",
    ]


def test_following_ends_when_until_says_and_prints_what_came_first(tmp_path: Path) -> None:
    """``steady jobs pool logs POOL ID`` follows a worker's setup until it ended:
    once ``until()`` is true the lines written by then, a last one without its
    newline too, are printed and ``show`` returns, with no deadline of its own."""
    path = tmp_path / "1.log"
    path.write_bytes(b"setup 1\n")
    out = io.BytesIO()
    asked: list[int] = []

    def until() -> bool:
        asked.append(1)
        if len(asked) == 2:  # the setup writes its last lines, then has ended
            with open(path, "ab") as handle:
                handle.write(b"setup 2\n--- setup finished ---")
        return len(asked) >= 2

    show(path, None, True, writer=LineWriter(out, str(path)), until=until)
    assert out.getvalue().decode().splitlines() == [
        "setup 1",
        "setup 2",
        "--- setup finished ---",
    ]
    assert len(asked) == 2
