"""Replica logs rotate by copy-and-truncate (the replica keeps its O_APPEND file
and the controller stays out of its output path), keep a bounded number of
copies, hold the home under a cap, and read back as one log."""

from __future__ import annotations

import io
import os
from pathlib import Path

from steadyserve.cli.logs import LineWriter, show
from steadyserve.controller.replica_logs import LogLimits, rotate, rotate_home, rotated
from steadyserve.home.paths import Home


def replica_log(home: Path, service: str, rid: int) -> Path:
    path = home / "services" / service / "replicas" / f"{rid}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_a_full_log_is_copied_then_truncated_and_the_writer_appends_at_the_start(
    tmp_path: Path,
) -> None:
    path = replica_log(tmp_path, "s", 1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # as the backend
    limits = LogLimits(max_bytes=100, backups=2)
    try:
        for round_ in range(4):
            os.write(fd, f"round {round_}\n".encode() * 20)
            assert rotate(path, limits)
            assert path.stat().st_size == 0
        os.write(fd, b"after\n")  # O_APPEND: at the new end, no hole
        assert path.read_bytes() == b"after\n"
    finally:
        os.close(fd)
    assert [p.name for p in rotated(path)] == ["1.log.2", "1.log.1"]  # oldest first
    assert path.with_name("1.log.1").read_bytes() == b"round 3\n" * 20
    assert path.with_name("1.log.2").read_bytes() == b"round 2\n" * 20
    assert not path.with_name("1.log.3").exists()
    assert oct(path.with_name("1.log.1").stat().st_mode & 0o777) == "0o600"
    assert not rotate(path, limits)  # under the limit: left alone


def test_the_home_cap_removes_the_oldest_copies_first(tmp_path: Path) -> None:
    limits = LogLimits(max_bytes=10, backups=3, home_cap=45)
    for service in ("a", "b"):
        path = replica_log(tmp_path, service, 1)
        for _ in range(3):
            path.write_bytes(b"x" * 20)
            rotate_home(Home(tmp_path), limits)
    copies = sorted(tmp_path.glob("services/*/replicas/*.log.*"))
    assert sum(p.stat().st_size for p in copies) <= 45
    assert len(copies) == 2
    newest = {p.parent.parent.name for p in copies if p.name.endswith(".1")}
    assert newest == {"b"}  # b's copies were written last


def test_steady_logs_reads_the_copies_then_the_file(tmp_path: Path) -> None:
    path = replica_log(tmp_path, "s", 1)
    path.with_name("1.log.2").write_bytes(b"one\ntwo\n")
    path.with_name("1.log.1").write_bytes(b"three\n")
    path.write_bytes(b"four\nfive\n")
    for tail, expected in (
        (None, b"one\ntwo\nthree\nfour\nfive\n"),
        (4, b"two\nthree\nfour\nfive\n"),
    ):
        out = io.BytesIO()
        show(path, tail, follow=False, writer=LineWriter(out, str(path)))
        assert out.getvalue() == expected


def test_limits_from_the_environment() -> None:
    assert LogLimits.from_env({"STEADY_REPLICA_LOG_MAX_BYTES": "2048"}).max_bytes == 2048
    assert LogLimits.from_env({"STEADY_REPLICA_LOG_BACKUPS": "-1"}).backups == 3
    assert LogLimits.from_env({}) == LogLimits()
