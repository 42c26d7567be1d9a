"""``steady logs NAME --access``: the request log read for people (one line a
request) and for scripts (--json: the log's lines as written), also followed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

LINES = [
    {
        "time": 1764547200.123456,
        "ts": "2025-12-01T00:00:00.123Z",
        "method": "GET",
        "path": "/v1/predict?x=1",
        "status": 200,
        "replica": 3,
        "version": 2,
        "latency_ms": 1.204,
        "bytes": 211,
        "client": "203.0.113.7",
        "user_agent": "curl/8.5.0",
        "request_id": "a1b2c3d4e5f6-1f",
        "entry": "endpoint",
    },
    {
        "time": 1764547201.5,
        "ts": "2025-12-01T00:00:01.500Z",
        "method": "POST",
        "path": "/-/%72econfigure",
        "status": 404,
        "replica": None,
        "version": None,
        "latency_ms": 0.061,
        "bytes": 117,
        "client": "127.0.0.1",
        "user_agent": None,
        "request_id": "a1b2c3d4e5f6-20",
        "reason": "blocked_path",
        "entry": "endpoint",
    },
    {
        "time": 1764547262.25,
        "ts": "2025-12-01T00:01:02.250Z",
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "replica": 4,
        "version": 2,
        "latency_ms": 61283.114,
        "bytes": 402113,
        "outcome": "client_aborted",
        "ttfb_ms": 201.377,
        "client": "127.0.0.1",
        "user_agent": None,
        "request_id": "a1b2c3d4e5f6-21",
        "entry": "endpoint",
    },
]


def _steady(home: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steadyserve.cli", "logs", *args],
        env={"STEADY_HOME": str(home), "PATH": "/usr/bin:/bin", "TZ": "UTC"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _home(tmp_path: Path) -> Path:
    log = tmp_path / "home" / "services" / "web" / "access.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return tmp_path / "home"


def test_people_get_one_line_a_request(tmp_path: Path) -> None:
    out = _steady(_home(tmp_path), "web", "--access", "--utc")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "2025-12-01T00:00:00.123Z 203.0.113.7 GET /v1/predict?x=1 200 1.2ms v2/r3"
        ' a1b2c3d4e5f6-1f "curl/8.5.0"',
        "2025-12-01T00:00:01.500Z 127.0.0.1 POST /-/%72econfigure 404 0.1ms lb:blocked_path"
        " a1b2c3d4e5f6-20 -",
        "2025-12-01T00:01:02.250Z 127.0.0.1 POST /v1/chat/completions 200:client_aborted"
        " 61283.1ms v2/r4 a1b2c3d4e5f6-21 -",
    ]


@pytest.mark.timeout(60)
def test_json_is_the_log_as_written_and_follow_keeps_reading(tmp_path: Path) -> None:
    home = _home(tmp_path)
    out = _steady(home, "web", "--access", "--json")
    assert [json.loads(line) for line in out.stdout.splitlines()] == LINES
    log = home / "services" / "web" / "access.log"
    stop = threading.Event()

    def append() -> None:
        # A line every half second until one is read: the command may start (and
        # seek to the file's end) only after a line written at a fixed moment.
        for i in range(60):
            if stop.wait(0.5):
                return
            with log.open("a") as handle:
                handle.write(json.dumps({**LINES[0], "request_id": f"later-{i}"}) + "\n")

    writer = threading.Thread(target=append)
    writer.start()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "steadyserve.cli",
            "logs",
            "web",
            "--access",
            "--follow",
            "--tail",
            "0",
            "--json",
        ],
        env={"STEADY_HOME": str(home), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["request_id"].startswith("later-")
    finally:
        stop.set()
        proc.terminate()
        proc.wait(timeout=10)
        writer.join(timeout=10)


def test_no_request_log_names_the_setting(tmp_path: Path) -> None:
    (tmp_path / "home" / "services" / "quiet").mkdir(parents=True)
    out = _steady(tmp_path / "home", "quiet", "--access")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "error: quiet has no request log yet (service.access_log: true turns it on)"
    )
