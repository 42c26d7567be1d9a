"""The Ray actor that holds one replica on whichever node Ray placed it.

It runs the replica exactly as the local backend does (a ``run`` command or the
Python runner as a subprocess in its own process group, in the version's
workdir that Ray's ``runtime_env`` shipped to the node) and answers the
controller's questions about it: where it listens, whether it still runs, what
it printed. The actor is named and detached, so it outlives the controller that
made it and a restarted controller finds it by name.

This module is imported on cluster nodes: it uses only the standard library,
so a node needs nothing of SteadyServe's own dependencies beyond Ray.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

# As replica_contract names them; spelled here so the actor imports nothing more.
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"

SETUP_MARKER = ".steady-setup-done"
"""Written next to the shipped workdir once ``setup`` succeeded on this node:
replicas of a version that land on the same node run setup once."""

LOG_CHUNK_BYTES = 256 * 1024


PORT_CLAIMS_DIR = "steadyserve-ray-ports"
"""Under the node's temp dir: one file per port handed to a replica on the node,
holding the pid of the actor that claimed it."""
MAX_PORT_TRIES = 64


def claim_ports(host: str, count: int, claims: Path) -> list[int]:
    """``count`` distinct ports free on ``host`` that no other live actor on this
    node claimed. The OS alone may hand the same free port to two actors starting
    replicas at once (each replica binds its port only a second or more later);
    a claim file per port, made with O_EXCL and naming the claiming actor's pid,
    settles it. A claim whose actor is gone is taken over."""
    claims.mkdir(parents=True, exist_ok=True)
    ports: list[int] = []
    with contextlib.ExitStack() as held:
        for _ in range(MAX_PORT_TRIES):
            if len(ports) == count:
                return ports
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))  # kept bound: the next bind gets another port
            port = int(sock.getsockname()[1])
            if _claim(claims / f"{host}-{port}"):
                ports.append(port)
    if len(ports) < count:
        release_ports(host, ports, claims)
        raise OSError(f"no free port on {host} after {MAX_PORT_TRIES} tries")
    return ports


def _claim(path: Path) -> bool:
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                owner = int(path.read_text() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner > 0 and _alive(owner):
                return False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # its actor is gone: the claim is stale
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_ports(host: str, ports: list[int], claims: Path) -> None:
    """Drop this actor's claims (its replica is gone)."""
    for port in ports:
        path = claims / f"{host}-{port}"
        with contextlib.suppress(OSError, ValueError):
            if int(path.read_text() or "0") == os.getpid():
                path.unlink()


def node_address() -> str:
    """The address other nodes reach this one at (Ray's own view of the node)."""
    import ray

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def with_gpu_ids(label: str, gpu_ids: list[str]) -> str:
    """What the actor asked Ray for, with the GPU ids Ray assigned:
    ``Ray(cpus=1, gpus=T4:1)`` -> ``Ray(cpus=1, gpus=T4:1, ids=0)``."""
    if not gpu_ids or not label.endswith(")"):
        return label
    inner = label[:-1]
    sep = "" if inner.endswith("(") else ", "
    return f"{inner}{sep}ids={','.join(gpu_ids)})"


class ReplicaActor:
    """One replica process and its log, kept on the node it runs on."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.proc: subprocess.Popen[bytes] | None = None
        logs = Path(tempfile.gettempdir()) / "steadyserve-ray-logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"{label}-{os.getpid()}.log"
        self.exit: int | None = None
        self.started: dict[str, Any] = {}
        self.claims = Path(tempfile.gettempdir()) / PORT_CLAIMS_DIR
        self.claimed: list[int] = []

    def setup(self, script: str | None, env: dict[str, str]) -> tuple[int, str]:
        """Run the version's ``setup`` once per node (the marker sits in the
        shipped workdir, which Ray shares between the actors of one version)."""
        if not script:
            return 0, ""
        marker = Path.cwd() / SETUP_MARKER
        lock = Path.cwd() / (SETUP_MARKER + ".lock")
        with open(lock, "w") as handle:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX)
            if marker.exists():
                return 0, ""
            done = subprocess.run(
                ["bash", "-c", script],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                check=False,
            )
            if done.returncode == 0:
                marker.touch()
            tail = done.stdout.decode(errors="replace").strip().splitlines()[-5:]
            return done.returncode, "\n".join(tail)

    def start(
        self, command: list[str], env: dict[str, str], ports: list[str], resources: str = ""
    ) -> dict[str, Any]:
        """Start the replica; pick a free port on this node for each env name in
        ``ports`` (the backend owns placement and addresses, not the controller)."""
        host = node_address()
        env = dict(env)
        self.claimed = claim_ports(host, len(ports), self.claims)
        for name, port in zip(ports, self.claimed, strict=True):
            env[name] = str(port)
        env["HOST"] = host
        import ray

        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
        if gpu_ids:
            # Ray gave this actor its own GPUs (and set them in the actor's environment);
            # the replica is the actor's child, so it gets the same ones.
            ids = ",".join(gpu_ids)
            env[CUDA_VISIBLE_DEVICES] = env[NVIDIA_VISIBLE_DEVICES] = ids
        if command and command[0] == "{python}":  # the Python runner: this node's interpreter
            import sys

            command = [sys.executable, *command[1:]]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        try:
            self.proc = subprocess.Popen(
                command,
                cwd=Path.cwd(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        context = ray.get_runtime_context()
        self.started = {
            "host": host,
            "ports": {name: int(env[name]) for name in ports},
            "pid": self.proc.pid,
            "node_id": context.get_node_id(),
            "hostname": socket.gethostname(),
            "resources": with_gpu_ids(resources, gpu_ids),  # the RESOURCES column
            "gpu_ids": gpu_ids,
        }
        return self.started

    def info(self) -> dict[str, Any] | None:
        """What :meth:`start` answered, and how much output there is so far: a
        restarted controller re-adopting this replica continues its log from here."""
        if self.proc is None:
            return None
        try:
            size = self.log_path.stat().st_size
        except OSError:
            size = 0
        return {**self.started, "log_size": size}

    def poll(self) -> int | None:
        """None while the replica runs, else its exit code (-N for signal N)."""
        if self.proc is None:
            return None
        if self.exit is None:
            self.exit = self.proc.poll()
        return self.exit

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM the replica's process group, SIGKILL what is left after
        ``timeout_s``; the answer comes once the replica has exited."""
        if self.proc is None:
            return None
        pid = self.proc.pid
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        release_ports(self.started.get("host", ""), self.claimed, self.claims)
        return self.poll()

    def discard(self) -> None:
        """The controller has copied the replica's whole output: delete it here,
        so that a node's temp dir does not keep every replica's log forever."""
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def read_log(self, offset: int) -> bytes:
        """Up to LOG_CHUNK_BYTES of the replica's output from ``offset``: the
        controller copies it into the replica's log file, so ``steady logs``
        works the same for a replica on any node."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(offset)
                return handle.read(LOG_CHUNK_BYTES)
        except OSError:
            return b""
