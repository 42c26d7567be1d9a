"""A two-node Ray cluster inside two network namespaces made for the test.

On these machines Ray binds the host's own network address unless it runs in
a namespace that has nothing else, so each node gets its own namespace and the
two are joined by a veth pair (10.77.N.1 head, 10.77.N.2 worker, N the
pytest-xdist worker's number, 0 without xdist): replicas then have distinct node
addresses, as on two machines, and nothing reaches the machine's own address.
Each xdist worker builds its own cluster: the namespaces and veth ends are named
by the process id, the addresses by the worker, so no two clusters on one machine
share a name or a GCS address (Ray finds "its" running GCS by scanning the
machine's processes for that address). The controller, its load balancers and the test's
clients run beside the head: the test's thread enters the head's namespace
(``setns``), and every process it starts inherits it.

Node loss is the worker namespace's processes killed. Everything the cluster
started is killed and both namespaces are deleted at the end.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

BACKENDS = ["local", "ray"]
"""What the core and update end-to-end tests run on: ``pytestmark =
pytest.mark.parametrize("steady", BACKENDS, indirect=True)`` in their module."""


def _worker_number() -> int:
    """pytest-xdist's worker number (``gw3`` is 3), 0 outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) % 250 if worker.startswith("gw") and worker[2:].isdigit() else 0


HEAD_IP = f"10.77.{_worker_number()}.1"
WORKER_IP = f"10.77.{_worker_number()}.2"
GCS_PORT = 6379
WORKER_RESOURCE = "steady_test_worker"
"""A custom resource only the worker node has: a test pins replicas with it."""

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _ray() -> str:
    return str(Path(sys.executable).parent / "ray")


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns failed")


def namespace_pids(ns: str) -> set[int]:
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return {int(p) for p in done.stdout.split()}


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process in ``ns`` until none is left (bounded)."""
    for _ in range(50):
        pids = namespace_pids(ns)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


@dataclass
class RayCluster:
    root: Path
    head_ns: str = ""
    worker_ns: str = ""
    address: str = f"{HEAD_IP}:{GCS_PORT}"
    _started: list[str] = field(default_factory=list)
    _temp: str = ""

    def start(self) -> RayCluster:
        # Ray's AF_UNIX socket paths live under the temp dir and must fit 107 bytes:
        # under pytest-xdist the tmp_path (".../popen-gw0/ray0/head") made the
        # plasma store's path too long and `ray start --head` failed.
        self._temp = tempfile.mkdtemp(prefix="steady-ray-", dir="/tmp")
        suffix = str(os.getpid() % 100000)
        self.head_ns, self.worker_ns = f"steady-ha{suffix}", f"steady-wk{suffix}"
        veth_head, veth_worker = f"sth{suffix}", f"stw{suffix}"
        for ns in (self.head_ns, self.worker_ns):
            _ip("netns", "add", ns)
            self._started.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        # Both ends are made inside their namespaces: a start that fails half-way
        # leaves no veth in the machine's namespace (deleting a namespace deletes them).
        _ip(
            "link", "add", veth_head, "netns", self.head_ns,
            "type", "veth", "peer", "name", veth_worker, "netns", self.worker_ns,
        )  # fmt: skip
        _ip("-n", self.head_ns, "addr", "add", f"{HEAD_IP}/24", "dev", veth_head)
        _ip("-n", self.worker_ns, "addr", "add", f"{WORKER_IP}/24", "dev", veth_worker)
        _ip("-n", self.head_ns, "link", "set", veth_head, "up")
        _ip("-n", self.worker_ns, "link", "set", veth_worker, "up")
        self._ray_start(
            self.head_ns,
            "--head",
            "--node-ip-address",
            HEAD_IP,
            "--port",
            str(GCS_PORT),
            "--include-dashboard",
            "false",
            "--temp-dir",
            self._temp,
        )
        self.start_worker()
        return self

    def _ray_start(self, ns: str, *args: str) -> None:
        env = dict(
            os.environ,
            RAY_USAGE_STATS_ENABLED="0",
            # A dead node is declared within seconds (the default takes ~30 s).
            RAY_health_check_initial_delay_ms="1000",
            RAY_health_check_period_ms="1000",
            RAY_health_check_failure_threshold="3",
        )
        done = subprocess.run(
            [
                "ip", "netns", "exec", ns, _ray(), "start", *args,
                "--num-cpus", "8", "--object-store-memory", str(80 * 1024 * 1024),
                "--disable-usage-stats",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )  # fmt: skip
        if done.returncode != 0:  # say why: a bare exit status hides Ray's own message
            tail = (done.stdout + done.stderr).strip()[-2000:]
            raise AssertionError(f"ray start in {ns} exited {done.returncode}:\n{tail}")

    def start_worker(self) -> None:
        self._ray_start(
            self.worker_ns,
            "--address",
            self.address,
            "--node-ip-address",
            WORKER_IP,
            "--resources",
            f'{{"{WORKER_RESOURCE}": 1000}}',
        )
        self.wait_nodes(2)

    def alive_nodes(self) -> int:
        code = f"import ray; ray.init(address={self.address!r}, logging_level='ERROR');"
        code += "print(sum(1 for n in ray.nodes() if n['Alive']))"
        done = subprocess.run(
            ["ip", "netns", "exec", self.head_ns, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else -1

    def wait_nodes(self, count: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.alive_nodes() == count:
                return
            time.sleep(1.0)
        raise AssertionError(f"Ray cluster did not reach {count} alive nodes")

    def kill_worker(self) -> None:
        """Node loss: every process of the worker node dies at once."""
        _kill_namespace(self.worker_ns)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run this thread (and every process it starts) beside the head."""
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/var/run/netns/{self.head_ns}", os.O_RDONLY)
        try:
            _setns(target)
            yield
        finally:
            _setns(back)
            os.close(back)
            os.close(target)

    def listening_outside(self) -> list[str]:
        """Ray processes with a listening socket outside the two namespaces."""
        ours = namespace_pids(self.head_ns) | namespace_pids(self.worker_ns)
        found = []
        for proc in psutil.process_iter(["pid", "name", "cmdline"]):
            try:
                cmdline = " ".join(proc.info["cmdline"] or [])
                is_ray = proc.info["name"] in ("raylet", "gcs_server") or any(
                    mark in cmdline for mark in ("ray::", "/ray/", "default_worker.py")
                )
                if not is_ray or proc.pid in ours:
                    continue
                if any(c.status == psutil.CONN_LISTEN for c in proc.net_connections("inet")):
                    found.append(f"{proc.pid} {cmdline[:80]}")
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        for ns in reversed(self._started):
            _kill_namespace(ns)
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "delete", ns)
        self._started.clear()
        if self._temp:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = ""
