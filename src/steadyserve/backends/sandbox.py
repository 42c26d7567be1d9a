"""The sandbox of an isolated replica: a unit that cannot climb out, like a pod
under Kubernetes' *restricted* Pod Security Standard.

An isolated replica (``service.isolation: network``) already has a network
namespace of its own (netns.py). Inside it, bubblewrap (``bwrap``) gives the
replica the rest of a container:

- a **user namespace** with every capability dropped (``CapEff``, ``CapPrm``,
  ``CapBnd`` and ``CapAmb`` all 0) and ``no_new_privs``: nothing it runs can gain
  a privilege, set-uid programs included;
- the **default seccomp filter** (seccomp_profile.py): no ``setns``, ``unshare``,
  ``mount``, ``ptrace``, module or BPF loading, keyrings, ...;
- a **PID namespace**: it sees its own processes only; PID 1 is a small init
  (sandbox_init.py) that forwards SIGTERM to the replica's group and reaps;
- a **mount namespace** built from nothing: read-only system folders (``/usr``,
  ``/etc`` with its secrets masked, ``/opt``, ``/sys``), the Python the package
  runs on, a ``/proc`` of its own, a minimal ``/dev`` (plus GPUs), a ``/tmp`` and
  ``/dev/shm`` of its own; of the home only its version's workdir, its version's
  environment, its service's cache folder (``HOME``) and, for a Python replica,
  the home's socket folder (routes socket, call sockets). ``control.key``, other
  services' folders and logs are not there;
- IPC and UTS namespaces of its own, and a cgroup namespace where the kernel has
  one.

The controller stays in the host's namespaces. The host side of the sandbox
(``bwrap``'s parent process, the replica's pid for the controller) is started
with SIGTERM ignored, so that the controller's SIGTERM to the replica's process
group reaches the init, which handles it, without ending the host side first: the
replica's pid lives exactly as long as the sandbox.

The replica's user id is 0 inside its user namespace and root's on the host's
file system, without any capability: it reads and writes what root *owns* among
the files it is shown (its workdir, its cache, the socket folder) and nothing
else, as the files are not in its mount namespace (docs/security.md).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from steadyserve.backends import seccomp_profile

INIT = Path(__file__).with_name("sandbox_init.py")
SYSTEM_DIRS = ("/usr", "/etc", "/opt")
"""Shown read-only (where they exist). Not ``/home``, ``/root``, ``/var``,
``/run``, ``/srv``, ``/mnt``: other users' and services' files."""
MERGED_USR = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Symlinks into ``/usr`` on merged-/usr systems (shown as the same links), else
folders shown read-only."""
MASKED_FILES = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
)
MASKED_DIRS = ("/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d")
"""Secrets of the host in ``/etc``: hidden (an empty folder, or a file no one can
read), since the replica's file-system identity is root's."""
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd")
DEFAULT_PIDS_MAX = 4096
"""Processes and threads an isolated replica may have at once (cgroup ``pids.max``):
a fork bomb stops there. A model server with many worker threads stays well under."""
TRIAL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Plan:
    """What one replica is shown, beyond the system folders."""

    workdir: Path
    """Its version's workdir: read-write (shared by the version's replicas), cwd."""
    cache: Path
    """Its service's cache folder, read-write: ``HOME`` (``~/.cache``, ``HF_HOME``)."""
    read_only: tuple[Path, ...] = ()
    """The interpreter and packages it runs on (never the home, nor a folder
    holding it: such a path is left out)."""
    environment: Path | None = None
    """Its version's environment in the home (``envs/KEY``): read-only."""
    read_write: tuple[Path, ...] = ()
    """The home's socket folder for a Python replica."""
    devices: tuple[Path, ...] = field(default_factory=tuple)
    """GPU device nodes."""


SWITCH = "STEADY_SANDBOX"
"""``0`` in the controller's environment turns the sandbox off (isolated replicas
keep their network namespace): for a replica that needs what the sandbox hides,
and for measuring what the sandbox costs (bench/sandbox_cost.py)."""


@lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why replicas cannot be sandboxed here, or None when they can (one line)."""
    if os.environ.get(SWITCH) == "0":
        return f"turned off ({SWITCH}=0)"
    if not sys.platform.startswith("linux"):
        return f"sandboxes are Linux only (this is {sys.platform})"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        seccomp_profile.program()
    except seccomp_profile.SeccompUnavailable as exc:
        return str(exc)
    trial = [bwrap, "--unshare-user", "--unshare-pid", "--cap-drop", "ALL", "--ro-bind", "/", "/"]
    try:
        done = subprocess.run(
            [*trial, "--", "/bin/true"],
            capture_output=True,
            text=True,
            timeout=TRIAL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run here ({exc})"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        why = lines[-1] if lines else f"exit {done.returncode}"
        return f"bubblewrap cannot make a user namespace here ({why})"
    return None


def interpreter_paths() -> tuple[Path, ...]:
    """Where the controller's Python and the package live: a Python replica's runner
    and the sandbox's init run on it inside (read-only)."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    found.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    # The folder the package is imported from (an editable install's src/); never
    # every sys.path entry, which may be the controller's working folder.
    found.add(str(INIT.parent.parent.parent))
    return tuple(sorted(Path(p) for p in found))


TRUST_VARIABLES = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
)


def trust_paths(env: dict[str, str]) -> tuple[Path, ...]:
    """The certificate files and folders the environment names (shown read-only:
    a download inside must trust what it trusts outside)."""
    found = (Path(env[name]) for name in TRUST_VARIABLES if env.get(name))
    return tuple(p for p in found if p.is_absolute() and p.exists())


def base_interpreter(venv: Path) -> Path:
    """The installation a version's venv links its ``python`` to."""
    return Path(os.path.realpath(venv / "bin" / "python")).parent.parent


def devices() -> tuple[Path, ...]:
    return tuple(Path(p) for pattern in GPU_DEVICES for p in sorted(glob.glob(pattern)))


def _outside(paths: Iterable[Path], home: Path) -> list[Path]:
    """``paths`` less any that would show the home or a folder holding it (only
    what the plan names of the home is shown), and less nested repeats."""
    kept: list[Path] = []
    for path in sorted({Path(os.path.abspath(p)) for p in paths}):
        if path == home or home.is_relative_to(path) or path.is_relative_to(home):
            continue
        if any(path.is_relative_to(k) for k in kept):
            continue
        kept.append(path)
    return kept


def bwrap_args(plan: Plan, home: Path, seccomp_fd: int) -> list[str]:
    """bubblewrap's arguments for ``plan`` (up to ``--``): pure, for the tests."""
    args = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--cap-drop", "ALL", "--as-pid-1"]
    for top in MERGED_USR:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for top in SYSTEM_DIRS:
        if os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for masked in MASKED_FILES:
        if os.path.lexists(masked):
            args += ["--ro-bind", "/dev/null", masked]
    for hidden in MASKED_DIRS:
        if os.path.isdir(hidden):
            args += ["--tmpfs", hidden]
    resolv = os.path.realpath("/etc/resolv.conf")
    if not resolv.startswith(("/etc/", "/usr/")) and os.path.isfile(resolv):
        args += ["--ro-bind", resolv, resolv]  # e.g. systemd-resolved's, under /run
    args += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
    args += ["--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]
    for device in plan.devices:
        args += ["--dev-bind", str(device), str(device)]
    for path in _outside(plan.read_only, home):
        args += ["--ro-bind", str(path), str(path)]
    if plan.environment is not None:
        args += ["--ro-bind", str(plan.environment), str(plan.environment)]
    for path in (plan.workdir, plan.cache, *plan.read_write):
        args += ["--bind", str(path), str(path)]
    args += ["--seccomp", str(seccomp_fd), "--chdir", str(plan.workdir), "--"]
    return args


def wrap(plan: Plan, home: Path, command: list[str], seccomp_fd: int) -> list[str]:
    """``command`` run in the sandbox under its init. The first process (the one
    the controller signals and waits for) ignores SIGTERM, and so does bwrap's
    host side after its ``exec``; the init inside handles it."""
    init = [sys.executable, "-I", "-S", str(INIT)]
    ignore = ["/bin/sh", "-c", "trap '' TERM; exec \"$@\"", "steady-sandbox"]
    return [*ignore, *bwrap_args(plan, home, seccomp_fd), *init, *command]


def environment(env: dict[str, str], plan: Plan) -> dict[str, str]:
    """The replica's environment inside: ``HOME`` (and so ``~/.cache`` and
    Hugging Face's cache) in its writable cache folder, ``TMPDIR`` its own /tmp."""
    return {**env, "HOME": str(plan.cache), "TMPDIR": "/tmp"}


def prepare_cache(cache: Path) -> None:
    """The service's cache folder, private to the home's owner (0700)."""
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(cache, 0o700)
