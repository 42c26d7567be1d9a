"""A cgroup per replica: a process tree that cannot escape, and a memory limit.

A replica's tag (``STEADY_REPLICA_TAG``) finds its processes only while they
keep their environment: ``env -i setsid ...`` escapes it. Cgroup membership is
inherited by every child and no unprivileged process can leave, so where the
controller may write cgroups each replica gets its own, and stopping a replica
kills everything in it.

Which cgroups: v2 when the controller's own v2 cgroup lists ``memory`` and
``pids`` in ``cgroup.controllers``; else the v1 hierarchies ``memory``,
``pids`` and ``freezer`` that are mounted and writable. Either way a replica's
cgroup is nested under the controller's own (``/proc/self/cgroup``)::

    <the controller's cgroup>/steady-<home-id>/<service>.<replica-id>

The name repeats the replica's tag, so a restarted controller (or its orphan
sweep) finds a replica's cgroup from any of its processes' ``/proc/PID/cgroup``.
Without writable cgroups the tag alone tracks replicas, as before.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("steadyserve.controller")

V1_CONTROLLERS = ("pids", "freezer", "memory")
"""Tracking prefers ``pids`` (cheapest); ``freezer`` stops forks while killing."""
V2_NEEDED = ("memory", "pids")
PREFIX = "steady-"
ENTER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 126; shift; done; shift; exec "$@"'
"""The shell that puts itself into a replica's cgroups, then becomes the replica:
the cgroup is joined before the replica's first instruction, so no child it
starts can be outside it."""
_REPLICA = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_-]*)\.(\d+)$")


@dataclass(frozen=True)
class Hierarchy:
    """One cgroup hierarchy the controller may use: ``mount`` is where it is
    mounted, ``own`` the controller's cgroup in it, ``controller`` its v1
    controller (``""`` for v2)."""

    version: int
    controller: str
    mount: Path

    own: str

    @property
    def base(self) -> Path:
        return self.mount / self.own.lstrip("/")


def parse_mounts(mountinfo: str) -> list[tuple[str, str, Path]]:
    """``(fstype, super options, mount point)`` of each cgroup mount in
    ``/proc/self/mountinfo`` (``"cgroup2"``, ``""`` for v2)."""
    found = []
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((rest[0], rest[2], Path(parts[4])))
    return found


def parse_own(self_cgroup: str) -> dict[str, str]:
    """The controller's cgroup per v1 controller (and ``""`` for v2), from
    ``/proc/self/cgroup`` (``4:memory:/a/b``, ``0::/c``)."""
    own: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        _, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        for name in names.split(",") if names else [""]:
            own[name] = path or "/"
    return own


def discover(
    mountinfo: str, self_cgroup: str, writable: Callable[[Path, int], bool] = os.access
) -> list[Hierarchy]:
    """The hierarchies replicas get cgroups in: v2's one when it has the
    controllers needed, else the writable v1 ones of :data:`V1_CONTROLLERS`
    (tracking first); [] when none (the tag-based fallback)."""
    check = writable
    mounts = parse_mounts(mountinfo)
    own = parse_own(self_cgroup)
    for fstype, _, mount in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        v2 = Hierarchy(2, "", mount, own[""])
        try:
            listed = (v2.base / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if all(c in listed for c in V2_NEEDED) and check(v2.base, os.W_OK):
            return [v2]
    found = []
    for controller in V1_CONTROLLERS:
        for fstype, options, mount in mounts:
            if fstype == "cgroup" and controller in options.split(",") and controller in own:
                hierarchy = Hierarchy(1, controller, mount, own[controller])
                if check(hierarchy.base, os.W_OK):
                    found.append(hierarchy)
                break
    return found


def name_for(tag: str) -> str | None:
    """``steady-<home-id>/<service>.<replica-id>`` for the tag ``<home-id>/<service>/<id>``."""
    home, _, rest = tag.partition("/")
    service, _, replica = rest.partition("/")
    if not (home and service and replica.isdigit()):
        return None
    return f"{PREFIX}{home}/{service}.{replica}"


def tag_for(path: str, home: str) -> str | None:
    """The replica tag a cgroup path names when it is one of home ``home``'s."""
    parts = path.strip("/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part == PREFIX + home:
            match = _REPLICA.fullmatch(parts[i + 1])
            if match and i + 2 == len(parts):
                return f"{home}/{match.group(1)}/{match.group(2)}"
    return None


def memory_text(limit: int) -> str:
    return f"{limit / (1 << 30):.3g} GB"


@dataclass
class ReplicaCgroup:
    """The cgroup folders of one replica (one per hierarchy)."""

    version: int
    dirs: dict[str, Path]
    """By controller (``""`` for v2)."""

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def enter(self, command: list[str]) -> list[str]:
        """``command`` as run from a shell that first joins these cgroups."""
        return ["/bin/sh", "-c", ENTER, "steady-cgroup", *self.procs_files, "--", *command]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(p) for p in Path(path).read_text().split()}
        return found

    def kill(self) -> None:
        """SIGKILL every process in the cgroup; nothing can fork meanwhile (v2's
        ``cgroup.kill``, or v1's freezer around the kill)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.dirs[""] / "cgroup.kill").write_text("1")
                return
        freezer = self.dirs.get("freezer")
        state = freezer / "freezer.state" if freezer else None
        if state is not None:
            with contextlib.suppress(OSError):
                state.write_text("FROZEN")
        try:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            if state is not None:
                with contextlib.suppress(OSError):
                    state.write_text("THAWED")

    def limit_pids(self, count: int) -> bool:
        """Cap the processes and threads in the cgroup at ``count`` (``pids.max``);
        False where the cgroup has no pids controller."""
        pids = self.dirs.get("pids" if self.version == 1 else "")
        if pids is None or not (pids / "pids.max").exists():
            return False
        try:
            (pids / "pids.max").write_text(str(count))
        except OSError:
            return False
        return True

    def pids_limit(self) -> int | None:
        """``pids.max`` as a number, None when unlimited or unknown."""
        pids = self.dirs.get("pids" if self.version == 1 else "")
        try:
            text = (pids / "pids.max").read_text().strip() if pids else ""
            return int(text)
        except (OSError, ValueError):
            return None

    def limit(self) -> int | None:
        """The memory limit in bytes, when one is set."""
        memory = self.dirs.get("memory" if self.version == 1 else "")
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        try:
            text = (memory / name).read_text().strip() if memory else ""
            value = int(text)
        except (OSError, ValueError):
            return None
        return value if value < (1 << 62) else None

    def oom_kills(self) -> int:
        """How many processes the kernel killed for reaching the memory limit."""
        memory = self.dirs.get("memory" if self.version == 1 else "")
        if memory is None:
            return 0
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            lines = (memory / name).read_text().splitlines()
        except OSError:
            return 0
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        if self.version == 1:  # kernels before 4.13 do not count kills: the peak tells
            limit = self.limit()
            with contextlib.suppress(OSError, ValueError):
                peak = int((memory / "memory.max_usage_in_bytes").read_text())
                return int(limit is not None and peak >= limit)
        return 0

    def remove(self, timeout_s: float = 2.0) -> None:
        """Delete the folders once the last process is gone (bounded), and the
        home's folder when no other replica's is left in it."""
        deadline = time.monotonic() + timeout_s
        for directory in self.dirs.values():
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.warning("cannot remove cgroup %s: %s", directory, exc.strerror)
                        break
                    time.sleep(0.02)
            with contextlib.suppress(OSError):
                directory.parent.rmdir()


class Cgroups:
    """The cgroups this controller gives replicas, found once."""

    def __init__(self, hierarchies: list[Hierarchy]) -> None:
        self.hierarchies = hierarchies
        self.version = hierarchies[0].version if hierarchies else 0
        self.has_memory = self.version == 2 or any(h.controller == "memory" for h in hierarchies)

    @classmethod
    def of_machine(cls) -> Cgroups:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
            own = Path("/proc/self/cgroup").read_text()
        except OSError:
            return cls([])
        return cls(discover(mountinfo, own))

    def describe(self) -> str:
        if not self.hierarchies:
            return "none"
        if self.version == 2:
            return f"v2 at {self.hierarchies[0].base}"
        return "v1 " + ", ".join(h.controller for h in self.hierarchies)

    def create(self, tag: str, memory_bytes: int | None) -> ReplicaCgroup:
        """The replica's cgroup, made now (``memory_bytes``: its limit). Raises
        OSError when the kernel refuses."""
        name = name_for(tag)
        if name is None:
            raise OSError(errno.EINVAL, f"not a replica tag: {tag}")
        dirs: dict[str, Path] = {}
        try:
            for hierarchy in self.hierarchies:
                if self.version == 2:
                    self._enable_v2(hierarchy, name)
                directory = hierarchy.base / name
                for attempt in range(3):  # another replica's stop may delete the parent
                    try:
                        directory.mkdir(parents=True, exist_ok=True)
                        break
                    except FileNotFoundError:
                        if attempt == 2:
                            raise
                dirs[hierarchy.controller] = directory
            cgroup = ReplicaCgroup(self.version, dirs)
            if memory_bytes is not None:
                self._limit(cgroup, memory_bytes)
            return cgroup
        except OSError:
            ReplicaCgroup(self.version, dirs).remove(timeout_s=0)
            raise

    def _enable_v2(self, hierarchy: Hierarchy, name: str) -> None:
        """v2 applies a controller to a cgroup only when every parent enables it for
        its children; the controller's own cgroup cannot when it holds processes,
        which leaves replicas tracked but without limits."""
        home = hierarchy.base / name.split("/")[0]
        home.mkdir(exist_ok=True)
        for parent in (hierarchy.base, home):
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text(" ".join("+" + c for c in V2_NEEDED))

    def _limit(self, cgroup: ReplicaCgroup, memory_bytes: int) -> None:
        if self.version == 2:
            if not (cgroup.dirs[""] / "memory.max").exists():
                return  # memory not enabled for it (see _enable_v2): tracked, not limited
            (cgroup.dirs[""] / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                (cgroup.dirs[""] / "memory.swap.max").write_text("0")
            return
        memory = cgroup.dirs.get("memory")
        if memory is None:
            return
        (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
        with contextlib.suppress(OSError):  # swap beyond the limit would dodge it
            (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))

    def of_pid(self, pid: int, home: str) -> ReplicaCgroup | None:
        """The cgroup of home ``home``'s replica that process ``pid`` is in, if any."""
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return None
        own = parse_own(text)
        dirs: dict[str, Path] = {}
        for hierarchy in self.hierarchies:
            path = own.get(hierarchy.controller)
            if path is not None and tag_for(path, home) is not None:
                dirs[hierarchy.controller] = hierarchy.mount / path.lstrip("/")
        return ReplicaCgroup(self.version, dirs) if dirs else None

    def replica_dirs(self, home: str) -> dict[str, ReplicaCgroup]:
        """Every replica cgroup of home ``home`` under this controller's own, by tag."""
        found: dict[str, ReplicaCgroup] = {}
        for hierarchy in self.hierarchies:
            folder = hierarchy.base / (PREFIX + home)
            with contextlib.suppress(OSError):
                for entry in os.scandir(folder):
                    match = _REPLICA.fullmatch(entry.name)
                    if match and entry.is_dir():
                        tag = f"{home}/{match.group(1)}/{match.group(2)}"
                        cgroup = found.setdefault(tag, ReplicaCgroup(self.version, {}))
                        cgroup.dirs[hierarchy.controller] = Path(entry.path)
        return found


def tag_in_cgroup(pid: int, home: str) -> str | None:
    """The replica tag that process ``pid``'s cgroups name (any hierarchy): how the
    orphan sweep recognises a replica's process that cleared its environment."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for path in parse_own(text).values():
        tag = tag_for(path, home)
        if tag is not None:
            return tag
    return None
