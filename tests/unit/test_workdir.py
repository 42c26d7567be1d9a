"""Workdir snapshots: copying, ignore rules, hashing, symlinks, special files,
refused roots, the size limit, sharing between versions, and pruning."""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import stat
from pathlib import Path

import pytest

from steadyserve.envs.workdir import (
    DEFAULT_MAX_BYTES,
    MAX_BYTES_ENV,
    WorkdirError,
    check_root,
    collect_garbage,
    content_hash,
    max_bytes_from_env,
    relative_excludes,
    remove_snapshot,
    scan,
    snapshot,
)
from steadyserve.spec import ServiceSpec
from steadyserve.spec.changes import classify
from steadyserve.store import Store


def make(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def take(source: Path, store: Path, number: int, **kwargs: object) -> Path:
    dest = store / "versions" / str(number) / "workdir"
    snapshot(source, dest, objects=store / "objects", **kwargs)  # type: ignore[arg-type]
    return dest


def files_of(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def old_hash(root: Path) -> str:
    """The hash as the release before this one computed it (regular files only)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(b"X" if os.access(path, os.X_OK) else b"F")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


# ------------------------------------------------------------------ copying


def test_snapshot_copies_files_dirs_and_executable_bits(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"app.py": "print(1)\n", "pkg/mod.py": "X = 1\n"})
    (src / "empty").mkdir()
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    dest = take(src, tmp_path / "home", 1)
    assert files_of(dest) == files_of(src)
    assert (dest / "empty").is_dir()
    assert os.access(dest / "run.sh", os.X_OK)
    assert not os.access(dest / "app.py", os.X_OK)


def test_snapshot_returns_the_hash_of_what_it_stored(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1", "b/c": "2"})
    dest = tmp_path / "v1"
    stored = snapshot(src, dest, objects=tmp_path / "objects")
    assert stored == content_hash(src) == content_hash(dest)


def test_byte_code_caches_are_not_content(tmp_path: Path) -> None:
    """A replica writes __pycache__ into its version's copy; a rollback copies that
    copy, and must still hash like the source (or the next in-place update restarts)."""
    src = make(tmp_path / "src", {"app.py": "x = 1\n"})
    stored = snapshot(src, tmp_path / "v1", objects=tmp_path / "objects")
    make(
        tmp_path / "v1", {"__pycache__/app.cpython-311.pyc": "bytes", "sub/__pycache__/m.pyc": "b"}
    )
    assert content_hash(tmp_path / "v1") == stored == content_hash(src)
    again = snapshot(tmp_path / "v1", tmp_path / "v3", objects=tmp_path / "objects")
    assert again == stored and not (tmp_path / "v3" / "__pycache__").exists()


def test_no_workdir_makes_an_empty_folder_and_no_hash(tmp_path: Path) -> None:
    dest = tmp_path / "v1" / "workdir"
    assert snapshot(None, dest, objects=tmp_path / "objects") is None
    assert dest.is_dir() and not any(dest.iterdir())


def test_an_existing_destination_is_never_overwritten(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1"})
    dest = make(tmp_path / "v1", {"keep": "me"})
    with pytest.raises(FileExistsError):
        snapshot(src, dest, objects=tmp_path / "objects")
    assert files_of(dest) == {"keep": b"me"}


def test_a_source_changing_mid_copy_records_nothing(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1"})
    expected = content_hash(src)
    (src / "a").write_text("2")  # changed after it was hashed, before it was copied
    with pytest.raises(WorkdirError, match="changed while it was being copied"):
        snapshot(
            src, tmp_path / "v" / "workdir", objects=tmp_path / "objects", expected_hash=expected
        )
    assert os.listdir(tmp_path / "v") == []  # no destination, no temporary folder


# ------------------------------------------------------------- ignore rules


def test_steadyignore_and_the_spec_file_are_left_out(tmp_path: Path) -> None:
    src = make(
        tmp_path / "src",
        {
            ".steadyignore": "# comment\n*.log\ncache/\nsecret.txt\n",
            "app.py": "x",
            "run.log": "noise",
            "cache/big.bin": "b",
            "deep/secret.txt": "s",
            "service.yaml": "name: x",
        },
    )
    exclude = relative_excludes(src, [src / "service.yaml", tmp_path / "elsewhere.yaml"])
    assert exclude == {"service.yaml"}
    dest = tmp_path / "v1"
    snapshot(src, dest, exclude, objects=tmp_path / "objects")
    assert sorted(files_of(dest)) == [".steadyignore", "app.py"]
    before = content_hash(src, exclude)
    (src / "run.log").write_text("more noise")
    (src / "service.yaml").write_text("name: y")
    assert content_hash(src, exclude) == before


def test_ignored_special_files_and_big_files_do_not_count(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {".steadyignore": "run/\nmodel.bin\n", "model.bin": b"0" * 5000})
    (src / "run").mkdir()
    os.mkfifo(src / "run" / "pipe")
    assert [e.rel for e in scan(src, max_bytes=100)] == [".steadyignore"]


# ------------------------------------------------------------------ hashing


def test_hash_follows_content_names_and_executable_bit(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a.py": "1", "b/c.py": "2"})
    first = content_hash(src)
    assert content_hash(src) == first
    (src / "a.py").write_text("3")
    second = content_hash(src)
    assert second != first
    (src / "a.py").chmod(0o755)
    assert content_hash(src) != second
    (src / "a.py").chmod(0o644)
    (src / "a.py").rename(src / "z.py")
    assert content_hash(src) != second


def test_hash_of_plain_files_is_unchanged_from_the_previous_release(tmp_path: Path) -> None:
    """Upgrading must not make every service's next update a restart."""
    src = make(tmp_path / "src", {"a.py": "1", "b/c.py": "2", "b/d/e": b"\x00\x01"})
    (src / "a.py").chmod(0o755)
    assert content_hash(src) == old_hash(src)


def test_empty_directories_do_not_change_the_hash(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1"})
    before = content_hash(src)
    (src / "empty").mkdir()
    assert content_hash(src) == before


# ----------------------------------------------------------------- symlinks


def test_symlinks_stay_links_and_resolve_where_they_did(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"real/mod.py": "X = 1\n", "a/file.txt": "f"})
    make(tmp_path, {"outside.txt": "outside"})
    (src / "lib").symlink_to("real")  # directory link inside
    (src / "a" / "up").symlink_to("../real/mod.py")  # relative, inside
    (src / "escape").symlink_to("../outside.txt")  # relative, outside
    (src / "abs_in").symlink_to(src / "a" / "file.txt")  # absolute, inside
    (src / "abs_out").symlink_to(tmp_path / "outside.txt")  # absolute, outside
    (src / "dangling").symlink_to("nowhere")
    dest = take(src, tmp_path / "home", 1)
    for name in ("lib", "a/up", "escape", "abs_in", "abs_out", "dangling"):
        assert (dest / name).is_symlink(), name
    assert os.readlink(dest / "lib") == "real"
    assert (dest / "lib" / "mod.py").read_text() == "X = 1\n"
    assert os.readlink(dest / "a" / "up") == "../real/mod.py"
    assert os.readlink(dest / "escape") == str(tmp_path / "outside.txt")
    assert (dest / "escape").read_text() == "outside"
    assert os.readlink(dest / "abs_in") == "a/file.txt"  # the snapshot's own copy
    assert os.readlink(dest / "abs_out") == str(tmp_path / "outside.txt")
    assert os.readlink(dest / "dangling") == "nowhere"
    assert content_hash(dest) == content_hash(src)


def test_a_link_target_change_is_a_content_change(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1", "b": "2"})
    (src / "link").symlink_to("a")
    before = content_hash(src)
    (src / "link").unlink()
    (src / "link").symlink_to("b")
    assert content_hash(src) != before


# ------------------------------------------------------------ special files


def test_a_fifo_is_refused_by_name_and_leaves_nothing(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1"})
    os.mkfifo(src / "pipe")
    with pytest.raises(WorkdirError, match=r"pipe is a FIFO"):
        take(src, tmp_path / "home", 1)
    assert not (tmp_path / "home").exists()


def test_a_socket_is_refused_by_name(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1"})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(src / "s.sock"))
        with pytest.raises(WorkdirError, match=r"s\.sock is a socket"):
            content_hash(src)
    finally:
        sock.close()


def test_a_character_device_is_refused_by_name(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1"})
    (src / "dev").mkdir()
    try:
        os.mknod(src / "dev" / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("mknod needs privileges")
    with pytest.raises(WorkdirError, match=r"dev/zero is a character device"):
        take(src, tmp_path / "home", 1)
    assert not (tmp_path / "home").exists()


# ------------------------------------------------------------ refused roots


def test_the_filesystem_root_is_refused() -> None:
    with pytest.raises(WorkdirError, match="filesystem root"):
        check_root(Path("/"), None)


def test_the_home_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(WorkdirError, match="home directory"):
        check_root(tmp_path, None)
    check_root(make(tmp_path / "code", {"a": "1"}), None)


def test_steady_home_and_its_parents_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "x" / "steady"
    home.mkdir(parents=True)
    for refused in (home, home.parent, tmp_path):
        with pytest.raises(WorkdirError, match="STEADY_HOME"):
            check_root(refused, home)
    check_root(home / "services" / "svc" / "versions" / "1" / "workdir", home)  # rollback source
    check_root(tmp_path / "x" / "other", home)


# --------------------------------------------------------------- size limit


def test_the_size_limit_stops_the_walk_with_a_clear_message(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a.bin": b"0" * 600, "b.bin": b"0" * 600})
    os.mkfifo(src / "z_pipe")  # after the limit is passed: never reached
    with pytest.raises(WorkdirError, match=f"more than 1000 bytes.*{MAX_BYTES_ENV}"):
        scan(src, max_bytes=1000)
    with pytest.raises(WorkdirError, match="more than 1000 bytes"):
        take(src, tmp_path / "home", 1, max_bytes=1000)
    assert not (tmp_path / "home").exists()
    os.unlink(src / "z_pipe")
    assert len(scan(src, max_bytes=1200)) == 2


def test_the_size_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_BYTES_ENV, raising=False)
    assert max_bytes_from_env() == DEFAULT_MAX_BYTES == 1 << 30
    monkeypatch.setenv(MAX_BYTES_ENV, "12345")
    assert max_bytes_from_env() == 12345
    for bad in ("0", "-1", "1GB"):
        monkeypatch.setenv(MAX_BYTES_ENV, bad)
        with pytest.raises(WorkdirError, match=MAX_BYTES_ENV):
            max_bytes_from_env()


# -------------------------------------------------------- sharing, pruning


def test_versions_share_unchanged_files(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1" * 1000, "b": "2" * 1000})
    store = tmp_path / "home"
    v1 = take(src, store, 1)
    objects = sorted(os.listdir(store / "objects"))
    v2 = take(src, store, 2)  # an in-place update: same content
    assert sorted(os.listdir(store / "objects")) == objects  # nothing new stored
    assert (v1 / "a").stat().st_ino == (v2 / "a").stat().st_ino
    (src / "b").write_text("3" * 1000)
    v3 = take(src, store, 3)
    assert (v3 / "a").stat().st_ino == (v1 / "a").stat().st_ino
    assert (v3 / "b").stat().st_ino != (v1 / "b").stat().st_ino
    assert len(os.listdir(store / "objects")) == 3


def test_stored_files_are_read_only(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "1"})
    dest = take(src, tmp_path / "home", 1)
    assert stat.S_IMODE((dest / "a").stat().st_mode) & 0o222 == 0


def test_same_bytes_with_another_executable_bit_are_stored_apart(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"a": "same", "b": "same"})
    (src / "b").chmod(0o755)
    dest = take(src, tmp_path / "home", 1)
    assert not os.access(dest / "a", os.X_OK) and os.access(dest / "b", os.X_OK)


def test_pruning_frees_only_files_no_version_holds(tmp_path: Path) -> None:
    src = make(tmp_path / "src", {"shared": "s" * 100, "only1": "1" * 100})
    store = tmp_path / "home"
    v1 = take(src, store, 1)
    (src / "only1").unlink()
    make(src, {"only2": "2" * 100})
    v2 = take(src, store, 2)
    assert len(os.listdir(store / "objects")) == 3
    remove_snapshot(v1)
    assert collect_garbage(store / "objects") == 1
    assert files_of(v2) == {"shared": b"s" * 100, "only2": b"2" * 100}
    assert len(os.listdir(store / "objects")) == 2
    remove_snapshot(v2)
    assert collect_garbage(store / "objects") == 2
    assert collect_garbage(tmp_path / "missing") == 0


# ---------------------------------------------------------- history_limit


def spec(**service: object) -> ServiceSpec:
    return ServiceSpec.model_validate({"run": "x", "service": {"replicas": 1, **service}})


def test_history_limit_defaults_to_ten_and_must_be_positive() -> None:
    assert spec().service.history_limit == 10
    assert spec(history_limit=2).service.history_limit == 2
    for bad in (0, -1, "x"):
        with pytest.raises(ValueError, match="history_limit"):
            spec(history_limit=bad)


def test_changing_history_limit_is_in_place() -> None:
    changes = classify(spec(), spec(history_limit=3), old_workdir_hash=None, new_workdir_hash=None)
    assert [(c.path, c.kind) for c in changes.changes] == [("service.history_limit", "in_place")]


def test_an_older_database_gains_the_pruned_column(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = sqlite3.connect(str(db_path))
    db.execute(
        "CREATE TABLE versions (service TEXT NOT NULL, version INTEGER NOT NULL, "
        "created_at REAL NOT NULL, spec_json TEXT NOT NULL, spec_yaml TEXT NOT NULL, "
        "workdir_hash TEXT, mode TEXT NOT NULL DEFAULT 'initial', "
        "changes TEXT NOT NULL DEFAULT '', outcome TEXT NOT NULL DEFAULT '', "
        "PRIMARY KEY (service, version))"
    )
    db.execute("INSERT INTO versions VALUES ('s', 1, 0, '{}', '', NULL, 'initial', '', 'active')")
    db.commit()
    db.close()
    store = Store(db_path)
    try:
        (row,) = store.versions("s")
        assert row.pruned == 0 and row.base_version is None
        store.update_version("s", 1, pruned=1)
        assert store.versions("s")[0].pruned == 1
    finally:
        store.close()


def test_skyignore_uses_gitignore_rules_with_negation(tmp_path: Path) -> None:
    """SkyPilot reads .skyignore with gitignore rules: negation, anchoring, folders only."""
    src = make(
        tmp_path / "src",
        {
            ".skyignore": "*.log\n!keep.log\n/top.txt\ndata/\n",
            "app.py": "x",
            "run.log": "noise",
            "keep.log": "kept",
            "top.txt": "anchored",
            "sub/top.txt": "not anchored here",
            "data/big.bin": "b",
            "sub/data/more.bin": "b",
        },
    )
    (src / "data.txt").write_text("a file, not the folder data/")
    assert sorted(e.rel for e in scan(src) if e.kind == "file") == [
        ".skyignore",
        "app.py",
        "data.txt",
        "keep.log",
        "sub/top.txt",
    ]


def test_steadyignore_can_re_include_what_skyignore_leaves_out(tmp_path: Path) -> None:
    src = make(
        tmp_path / "src",
        {
            ".skyignore": "*.bin\n",
            ".steadyignore": "!weights.bin\n",
            "weights.bin": "w",
            "x.bin": "x",
        },
    )
    assert sorted(e.rel for e in scan(src) if e.kind == "file") == [
        ".skyignore",
        ".steadyignore",
        "weights.bin",
    ]
