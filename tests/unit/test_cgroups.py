"""Which cgroups replicas get (parsed from /proc/self/mountinfo and /proc/self/cgroup
texts: pure), how a replica's cgroup is named after its tag, and the memory limit
``resources.memory`` asks for."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from steadyserve.backends import cgroups
from steadyserve.spec import parse_service

# This machine's shape: an empty v2 mount beside v1 hierarchies.
MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
SELF = """\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/abc
1:cpu,cpuacct:/
0::/
"""


def writable(path: Path, mode: int) -> bool:
    return True


def test_v1_hierarchies_nest_under_the_controllers_own_cgroups() -> None:
    found = cgroups.discover(MOUNTINFO, SELF, writable)
    assert [(h.version, h.controller) for h in found] == [
        (1, "pids"),
        (1, "freezer"),
        (1, "memory"),
    ]
    assert found[2].base == Path("/sys/fs/cgroup/memory/process_api/abc")
    assert found[0].base == Path("/sys/fs/cgroup/pids")
    assert cgroups.parse_own(SELF)["cpuacct"] == "/"


def test_no_writable_hierarchy_is_the_tag_fallback() -> None:
    assert cgroups.discover(MOUNTINFO, SELF, lambda path, mode: False) == []
    assert cgroups.discover("", SELF, writable) == []
    assert cgroups.Cgroups([]).describe() == "none"


def test_v2_is_used_when_it_lists_the_controllers_needed(tmp_path: Path) -> None:
    (tmp_path / "user.slice").mkdir()
    mountinfo = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n" + MOUNTINFO
    own = "0::/user.slice\n"
    (tmp_path / "user.slice" / "cgroup.controllers").write_text("cpu io\n")
    assert cgroups.discover(mountinfo, own, writable) == []  # no memory, pids: v1 (none here)
    (tmp_path / "user.slice" / "cgroup.controllers").write_text("cpu memory pids\n")
    (v2,) = cgroups.discover(mountinfo, own, writable)
    assert v2.version == 2 and v2.base == tmp_path / "user.slice"


def test_a_replicas_cgroup_is_named_after_its_tag_and_back() -> None:
    name = cgroups.name_for("0123456789abcdef/web/7")
    assert name == "steady-0123456789abcdef/web.7"
    assert cgroups.tag_for("/process_api/abc/" + name, "0123456789abcdef") == (
        "0123456789abcdef/web/7"
    )
    assert cgroups.tag_for("/process_api/abc/" + name, "ffffffffffffffff") is None
    assert cgroups.tag_for("/steady-0123456789abcdef", "0123456789abcdef") is None
    assert cgroups.name_for("not-a-tag") is None
    assert cgroups.memory_text(int(0.1 * (1 << 30))) == "0.1 GB"


def test_oom_kills_are_read_from_v1_and_v2_files(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (v1 / "memory.limit_in_bytes").write_text("107374182\n")
    one = cgroups.ReplicaCgroup(1, {"memory": v1})
    assert one.oom_kills() == 1 and one.limit() == 107374182
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    (v2 / "memory.max").write_text("max\n")
    two = cgroups.ReplicaCgroup(2, {"": v2})
    assert two.oom_kills() == 0 and two.limit() is None
    assert cgroups.ReplicaCgroup(1, {"pids": v1}).oom_kills() == 0


def test_memory_without_plus_is_a_limit_with_plus_a_minimum(tmp_path: Path) -> None:
    def limit(memory: object) -> int | None:
        spec = parse_service(
            {"name": "m", "run": "true", "resources": {"memory": memory}}, base_dir=tmp_path
        )
        return spec.resources.memory_limit_bytes

    assert limit(8) == 8 << 30
    assert limit("512MB") == 512 << 20
    assert limit(0.1) == int(0.1 * (1 << 30))
    assert limit("8+") is None
    assert (
        parse_service({"name": "m", "run": "true"}, base_dir=tmp_path).resources.memory_limit_bytes
        is None
    )


MACHINE = cgroups.Cgroups.of_machine()


@pytest.mark.skipif(not MACHINE.hierarchies, reason="no writable cgroups here")
def test_a_real_cgroup_holds_a_tree_that_left_its_session_and_is_killed_whole() -> None:
    tag = f"{'0' * 15}1/unit/{os.getpid()}"
    cgroup = MACHINE.create(tag, 64 << 20 if MACHINE.has_memory else None)
    try:
        script = "setsid sleep 60 & echo $!; exec sleep 60"
        proc = subprocess.Popen(
            cgroup.enter(["sh", "-c", script]), stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while cgroup.pids() != {proc.pid, child} and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cgroup.pids() == {proc.pid, child}
        if MACHINE.has_memory and MACHINE.version == 1:
            assert cgroup.limit() == 64 << 20
        cgroup.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while cgroup.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cgroup.pids() == set()
    finally:
        cgroup.kill()
        cgroup.remove()
    assert not any(d.exists() for d in cgroup.dirs.values())
    assert not any(d.parent.exists() for d in cgroup.dirs.values())
