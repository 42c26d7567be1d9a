"""Workdir snapshots through the real CLI and controller: bad workdirs are bad input,
symlinks survive, versions share unchanged files, and old versions are pruned."""

from __future__ import annotations

import os
import sqlite3
import stat
import textwrap
from pathlib import Path

import pytest

from tests.helpers.steady import EXAMPLES, Steady

SERVER = EXAMPLES / "http_server" / "server.py"


def workdir(path: Path, files: int = 3, size: int = 1000, seed: str = "x") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "server.py").write_bytes(SERVER.read_bytes())
    for i in range(files):
        (path / f"f{i}.bin").write_bytes(((seed * size)[:size] + str(i)).encode())
    return path


def service(
    tmp: Path, source: Path | str, *, name: str = "svc", extra: str = "", file: str = ""
) -> Path:
    path = tmp / (file or f"{name}.yaml")
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe: /health
          replicas: 0
          graceful_shutdown_timeout_s: 1
        """)
        + (f"  {extra}\n" if extra else "")
        + f"workdir: {source}\nrun: python3 server.py\n"
    )
    return path


def leftovers(home: Path) -> list[str]:
    """Anything a refused command left in STEADY_HOME's service folders."""
    services = home / "services"
    if not services.exists():
        return []
    return sorted(str(p.relative_to(home)) for p in services.rglob("*"))


def assert_bad_input(proc: object, *words: str) -> None:
    code, err = proc.returncode, proc.stderr  # type: ignore[attr-defined]
    assert code == 2, f"exit {code}: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], lines[0]


def test_special_files_are_refused_by_name(steady: Steady, tmp_path: Path) -> None:
    src = workdir(tmp_path / "app")
    os.mkfifo(src / "pipe")
    assert_bad_input(steady.run("up", str(service(tmp_path, src)), check=False), "pipe", "FIFO")
    os.unlink(src / "pipe")
    (src / "dev").mkdir()
    try:
        os.mknod(src / "dev" / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("mknod needs privileges")
    proc = steady.run("up", str(service(tmp_path, src)), check=False)
    assert_bad_input(proc, "dev/zero", "character device")
    assert leftovers(steady.home) == []
    assert steady.status()["services"] == []


def test_refused_roots_even_on_dry_run(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(service(tmp_path, workdir(tmp_path / "app"))))
    for root, why in (("/", "filesystem root"), (steady.home.parent, "STEADY_HOME")):
        spec = service(tmp_path, root, file="bad.yaml")
        assert_bad_input(steady.run("update", "svc", str(spec), "--dry-run", check=False), why)
        assert_bad_input(steady.run("update", "svc", str(spec), check=False), why)
        other = service(tmp_path, root, name="other", file="other.yaml")
        assert_bad_input(steady.run("up", str(other), check=False), why)
    assert [s["name"] for s in steady.status()["services"]] == ["svc"]
    assert not (steady.home / "services" / "svc" / "versions" / "2").exists()


def test_size_limit_is_configurable_and_named(
    steady: Steady, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEADY_WORKDIR_MAX_BYTES", "50000")
    big = workdir(tmp_path / "big", files=100, size=1000)
    assert_bad_input(
        steady.run("up", str(service(tmp_path, big)), check=False), "STEADY_WORKDIR_MAX_BYTES"
    )
    assert leftovers(steady.home) == []
    (big / ".steadyignore").write_text("f*.bin\n")
    steady.run("up", str(service(tmp_path, big)))


def test_symlinks_are_kept_as_links(steady: Steady, tmp_path: Path) -> None:
    src = workdir(tmp_path / "app")
    (src / "real_lib").mkdir()
    (src / "real_lib" / "mod.py").write_text("X = 1\n")
    (src / "lib").symlink_to("real_lib")
    (tmp_path / "outside.txt").write_text("outside\n")
    (src / "up.txt").symlink_to("../outside.txt")
    steady.run("up", str(service(tmp_path, src)))
    stored = steady.home / "services" / "svc" / "versions" / "1" / "workdir"
    assert (stored / "lib").is_symlink() and os.readlink(stored / "lib") == "real_lib"
    assert (stored / "lib" / "mod.py").read_text() == "X = 1\n"
    assert (stored / "up.txt").is_symlink()
    assert (stored / "up.txt").read_text() == "outside\n"


def versions(home: Path) -> list[tuple[int, str, int]]:
    db = sqlite3.connect(str(home / "state.db"))
    try:
        rows = db.execute(
            "SELECT version, outcome, pruned FROM versions WHERE service = 'svc' ORDER BY version"
        ).fetchall()
    finally:
        db.close()
    return [(int(v), str(o), int(p)) for v, o, p in rows]


def disk_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root``, each inode counted once (like du)."""
    seen: set[int] = set()
    total = 0
    for path in root.rglob("*"):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and info.st_ino not in seen:
            seen.add(info.st_ino)
            total += info.st_size
    return total


def test_in_place_updates_share_files_and_history_is_pruned(steady: Steady, tmp_path: Path) -> None:
    src = workdir(tmp_path / "app", files=50, size=20_000)
    source_bytes = sum(p.stat().st_size for p in src.iterdir())
    steady.run("up", str(service(tmp_path, src, extra="history_limit: 3")))
    for ongoing in (10, 20, 30):  # in place: same files
        spec = service(tmp_path, src, extra=f"history_limit: 3\n  max_ongoing_requests: {ongoing}")
        steady.run("update", "svc", str(spec))
    home = steady.home / "services" / "svc"
    assert disk_bytes(home) < 1.2 * source_bytes, "in-place versions copied the files again"
    rows = versions(steady.home)
    assert [v for v, *_ in rows] == [1, 2, 3, 4]
    assert [p for *_, p in rows] == [1, 0, 0, 0]
    assert not (home / "versions" / "1" / "workdir").exists()
    history = steady.run("history", "svc").stdout
    assert "pruned" in history
    proc = steady.run("rollback", "svc", "--to", "1", check=False)
    assert_bad_input(proc, "version 1", "pruned")
    # A content change after the limit shrinks: only the kept versions' files stay.
    new = workdir(tmp_path / "app2", files=50, size=20_000, seed="y")
    steady.run("update", "svc", str(service(tmp_path, new, extra="history_limit: 1")))
    assert steady.run("rollback", "svc", "--to", "4", "--dry-run", check=False).returncode == 0
    stored = [int(p.name) for p in (home / "versions").iterdir() if (p / "workdir").exists()]
    assert sorted(stored) == [4, 5]  # 5 is current; 4 is what 'steady rollback' goes back to
    assert disk_bytes(home) < 2.2 * source_bytes
