"""A workdir change in a plan lists the files added, removed and changed (a count
past the limit), where it showed two 64-character content hashes."""

from __future__ import annotations

import io
import os
from pathlib import Path

from rich.console import Console

from steadyserve.cli.tables import changes_table
from steadyserve.envs.workdir_diff import describe, workdir_diff


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_added_removed_and_changed_files(tmp_path: Path) -> None:
    old = _tree(tmp_path / "old", {"app.py": "v1", "same.txt": "x", "gone.txt": "g", "d/x": "1"})
    new = _tree(tmp_path / "new", {"app.py": "v2", "same.txt": "x", "d/x": "1", "new.py": "n"})
    (new / "run.sh").write_text("#!/bin/sh\n")
    (old / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(new / "run.sh", 0o755)  # the bit alone is a change: replicas see it
    files = workdir_diff(old, new)
    assert files == {
        "added": ["new.py"],
        "removed": ["gone.txt"],
        "changed": ["app.py", "run.sh"],
        "counts": {"added": 1, "removed": 1, "changed": 2},
    }
    assert describe(files) == (
        ["- gone.txt", "~ app.py", "~ run.sh"],
        ["+ new.py", "~ app.py", "~ run.sh"],
    )


def test_past_the_limit_a_count(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    new = _tree(tmp_path / "new", {f"f{i:02}.py": "" for i in range(25)})
    files = workdir_diff(old, new, limit=3)
    assert files["added"] == ["f00.py", "f01.py", "f02.py"] and files["counts"]["added"] == 25
    assert describe(files)[1] == ["+ f00.py", "+ f01.py", "+ f02.py", "+ ... and 22 more"]


def test_the_plan_table_shows_files_not_hashes() -> None:
    change = {
        "path": "workdir",
        "kind": "restart",
        "old": "a" * 64,
        "new": "b" * 64,
        "why": "workdir content changed",
        "files": {
            "added": ["new.py"],
            "removed": [],
            "changed": ["app.py"],
            "counts": {"added": 1, "removed": 0, "changed": 1},
        },
    }
    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    console.print(changes_table([change]))
    text = console.export_text()
    assert "+ new.py" in text and "~ app.py" in text and "a" * 64 not in text, text
