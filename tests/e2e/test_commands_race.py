"""Concurrent commands on one service: no shared temp folder, no half-copied version.

Two ``steady update`` (or ``up``) of one service used to take the same version
number and share its temporary folder: one got a 500 and, now and then, the
version that was recorded held only part of its files. Commands on one service
are now serialised: the loser answers 409 (exit 2, one line), and every version
that is recorded holds exactly the files of its source.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.helpers.steady import EXAMPLES, Steady

SERVER = EXAMPLES / "http_server" / "server.py"
FILES = 300
FILE_BYTES = 50_000
ROUNDS = 3


def make_workdir(path: Path, seed: str) -> Path:
    """``server.py`` plus 300 files of 50 KB whose bytes depend on ``seed``."""
    path.mkdir(parents=True)
    (path / "server.py").write_bytes(SERVER.read_bytes())
    block = hashlib.sha256(seed.encode()).digest() * (FILE_BYTES // 32 + 1)
    for i in range(FILES):
        (path / f"data_{i:03d}.bin").write_bytes(block[:FILE_BYTES] + str(i).encode())
    return path


def spec_file(tmp: Path, filename: str, workdir: Path, name: str = "svc") -> Path:
    path = tmp / filename
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe: /health
          replicas: 0
          graceful_shutdown_timeout_s: 1
        workdir: {workdir}
        run: python3 server.py
        """)
    )
    return path


def tree_digest(root: Path) -> str:
    """Each regular file's relative path and bytes, independent of the code under test."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def start(steady: Steady, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "steadyserve.cli", *args],
        env=steady.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=180)
    return proc.returncode, err


def race(
    steady: Steady, first: list[str], second: list[str], delay: float = 0.04
) -> list[tuple[int, str]]:
    """Start ``first``, then ``second`` 40 ms later, as the issue's reproduction does."""
    a = start(steady, *first)
    time.sleep(delay)
    b = start(steady, *second)
    return [finish(a), finish(b)]


def versions(home: Path, name: str) -> list[tuple[int, str | None, str, str]]:
    db = sqlite3.connect(str(home / "state.db"))
    try:
        rows = db.execute(
            "SELECT version, workdir_hash, spec_json, outcome FROM versions "
            "WHERE service = ? ORDER BY version",
            (name,),
        ).fetchall()
    finally:
        db.close()
    return [(int(v), h, s, o) for v, h, s, o in rows]


def assert_lost_cleanly(results: list[tuple[int, str]]) -> None:
    """Each command either succeeded or lost with exit 2 and one line; never a 500."""
    for code, err in results:
        assert code in (0, 2), f"exit {code}: {err}"
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1, err
            assert "busy" in lines[0] or "already exists" in lines[0], err
            assert "Internal" not in lines[0] and "500" not in lines[0], err


def assert_snapshots_match_sources(steady: Steady, name: str) -> None:
    import json

    for version, stored_hash, spec_json, _ in versions(steady.home, name):
        stored = steady.home / "services" / name / "versions" / str(version) / "workdir"
        source = Path(json.loads(spec_json)["workdir"])
        assert stored.is_dir(), f"version {version} was recorded without its files"
        assert tree_digest(stored) == tree_digest(source), f"version {version} is incomplete"
        assert stored_hash is not None
        from steadyserve.envs.workdir import content_hash

        assert stored_hash == content_hash(source), f"version {version}: stored hash differs"


def test_concurrent_updates_record_only_complete_versions(steady: Steady, tmp_path: Path) -> None:
    base = spec_file(tmp_path, "base.yaml", make_workdir(tmp_path / "w0", "base"))
    steady.run("up", str(base))
    outcomes = []
    for round_ in range(ROUNDS):
        wa = spec_file(tmp_path, f"wa{round_}.yaml", make_workdir(tmp_path / f"wa{round_}", "a"))
        wb = spec_file(tmp_path, f"wb{round_}.yaml", make_workdir(tmp_path / f"wb{round_}", "b"))
        results = race(steady, ["update", "svc", str(wa)], ["update", "svc", str(wb)])
        assert_lost_cleanly(results)
        outcomes.append([code for code, _ in results])
        assert_snapshots_match_sources(steady, "svc")
    numbers = [v for v, *_ in versions(steady.home, "svc")]
    assert numbers == list(range(1, len(numbers) + 1))
    print(f"race outcomes (exit codes per round): {outcomes}")


def test_concurrent_ups_of_one_name_one_wins_other_409(steady: Steady, tmp_path: Path) -> None:
    steady.run("controller", "start", check=False)
    wa, wb = make_workdir(tmp_path / "wa", "a"), make_workdir(tmp_path / "wb", "b")
    for round_ in range(ROUNDS):
        name = f"twin{round_}"
        a = spec_file(tmp_path, f"{name}a.yaml", wa, name=name)
        b = spec_file(tmp_path, f"{name}b.yaml", wb, name=name)
        results = race(steady, ["up", str(a)], ["up", str(b)], delay=0.005 * round_)
        assert_lost_cleanly(results)
        assert sorted(code for code, _ in results) == [0, 2], results
        assert_snapshots_match_sources(steady, name)
        assert len(versions(steady.home, name)) == 1


def test_update_racing_down_ends_in_a_terminal_state(steady: Steady, tmp_path: Path) -> None:
    base = spec_file(tmp_path, "base.yaml", make_workdir(tmp_path / "w0", "base"))
    steady.run("up", str(base))
    wa = spec_file(tmp_path, "wa.yaml", make_workdir(tmp_path / "wa", "a"))
    results = race(steady, ["update", "svc", str(wa)], ["down", "svc"])
    for code, err in results:
        assert code in (0, 2), f"exit {code}: {err}"
    rows = versions(steady.home, "svc")
    assert rows, "the service's history is kept by a down without --purge"
    assert all(outcome != "in progress" for *_, outcome in rows), rows
    assert "svc" not in [s["name"] for s in steady.status()["services"]]


def test_concurrent_ups_of_two_names_get_two_endpoints(steady: Steady, tmp_path: Path) -> None:
    """Two ``steady up`` of different services at once used to take the same free
    port (each chose it before either was recorded), and their load balancers both
    bound it (SO_REUSEPORT): the kernel sent each client to either service."""
    steady.run("controller", "start", check=False)
    wa, wb = make_workdir(tmp_path / "wa", "a"), make_workdir(tmp_path / "wb", "b")
    a = spec_file(tmp_path, "a.yaml", wa, name="left")
    b = spec_file(tmp_path, "b.yaml", wb, name="right")
    results = race(steady, ["up", str(a)], ["up", str(b)], delay=0.005)
    assert [code for code, _ in results] == [0, 0], results
    ports = {steady.service(name)["endpoint"] for name in ("left", "right")}
    assert len(ports) == 2, ports
