"""The service files of both versions are left out of both sides of a workdir
comparison, and the old side is what the snapshot held when taken (a file setup
or a replica wrote into its folder since is not a change)."""

from __future__ import annotations

from pathlib import Path

from steadyserve.envs import manifest
from steadyserve.envs.workdir import content_hash, scan, snapshot
from steadyserve.envs.workdir_diff import workdir_diff


def _version(tmp: Path, source: Path, left_out: set[str]) -> tuple[Path, str | None]:
    """A version's folder as the controller stores it: the copy and its manifest."""
    version = tmp / "versions" / "1"
    stored = snapshot(source, version / "workdir", left_out, objects=tmp / "objects")
    manifest.write(version, left_out, scan(version / "workdir"))
    return version, stored


def test_switching_service_files_in_one_folder_is_no_change(tmp_path: Path) -> None:
    source = tmp_path / "code"
    source.mkdir()
    for name, text in {
        "one.yaml": "a",
        "two.yaml": "b",
        "server.py": "x",
        "config.yaml": "k",
    }.items():
        (source / name).write_text(text)
    version, stored = _version(tmp_path, source, {"one.yaml"})
    recorded = manifest.read(version)
    assert recorded.left_out == {"one.yaml"}
    (version / "workdir" / "model.bin").write_text("written by setup")  # not code

    both = {"one.yaml", "two.yaml"}  # the update from two.yaml leaves out both
    new = content_hash(source, both)
    assert manifest.old_hash(version / "workdir", recorded, both, stored) == new
    assert manifest.old_hash(version / "workdir", recorded, {"one.yaml"}, stored) == stored
    files = workdir_diff(version / "workdir", source, both, old_manifest=recorded)
    assert files["counts"] == {"added": 0, "removed": 0, "changed": 0}

    (source / "config.yaml").write_text("k2")  # a file the replica reads: a change
    assert manifest.old_hash(version / "workdir", recorded, both, stored) != content_hash(
        source, both
    )
    files = workdir_diff(version / "workdir", source, both, old_manifest=recorded)
    assert files["changed"] == ["config.yaml"] and files["counts"]["added"] == 0


def test_a_version_without_a_manifest_reads_as_one_that_left_nothing_out(tmp_path: Path) -> None:
    assert manifest.read(tmp_path) == manifest.Manifest(frozenset(), None)
    (tmp_path / manifest.MANIFEST).write_text("{not json")
    assert manifest.read(tmp_path) == manifest.Manifest(frozenset(), None)


def test_a_version_stored_before_manifests_keeps_its_hash_for_its_own_file(
    tmp_path: Path,
) -> None:
    """The first update after an upgrade, from the same file: the old copy never held
    that file, so its recorded hash is compared as it is (a file setup wrote into the
    copy since is not read)."""
    source = tmp_path / "code"
    source.mkdir()
    (source / "svc.yaml").write_text("a")
    (source / "server.py").write_text("x")
    copy = tmp_path / "v1" / "workdir"
    stored = snapshot(source, copy, {"svc.yaml"}, objects=tmp_path / "objects")
    (copy / "model.bin").write_text("written by setup")
    old = manifest.Manifest(frozenset(), None)  # no manifest: an older release's version
    assert manifest.old_hash(copy, old, {"svc.yaml"}, stored) == stored
    assert stored == content_hash(source, {"svc.yaml"})
