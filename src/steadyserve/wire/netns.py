"""How a process reaches a replica inside its own network namespace, while it stays
in the host's: the namespace's path (what the route table and the probes carry), and
sockets made inside it. The backend makes and removes namespaces; every other
process (the load balancer, the controller's probes) only enters them through here.

A socket belongs to the namespace it was created in, for its whole life; only
its creation must happen inside. So a short-lived thread enters the namespace
with ``setns(2)`` (through ctypes: Python 3.11 has no ``os.setns``), creates the
socket and ends; the event loop connects it and uses it like any other. The
load balancer pools its upstream connections, so this runs once per new
connection, never per request (bench/RESULTS.md measures it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from steadyserve.wire import replica_contract as contract

NETNS_DIR = Path("/run/netns")
PREFIX = "ssv-"
"""Every namespace SteadyServe makes is named ssv-<home>-... (backends/netns.py)."""
"""Where ``ip netns`` keeps a namespace open by its name."""


def path_of(name: str) -> str:
    """Where a process (the load balancer, a probe) opens the namespace to enter it."""
    return str(NETNS_DIR / name)


CLONE_NEWNET = 0x40000000

_Protocol = TypeVar("_Protocol", bound=asyncio.BaseProtocol)
_Result = TypeVar("_Result")
_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def run_in(netns_path: str, work: Callable[[], _Result]) -> _Result:
    """``work()`` done inside the namespace at ``netns_path``; the calling thread's
    own namespace is untouched (the work is done on a thread of its own)."""
    made: list[_Result] = []
    failed: list[BaseException] = []

    def inside() -> None:
        try:
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            made.append(work())
        except BaseException as exc:  # carried to the caller
            failed.append(exc)

    # A fresh thread, never a pooled one: it ends inside the namespace.
    thread = threading.Thread(target=inside, name="netns-socket", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def socket_in(netns_path: str, family: int = socket.AF_INET) -> socket.socket:
    """A TCP socket created inside the namespace at ``netns_path``."""
    return run_in(netns_path, lambda: socket.socket(family, socket.SOCK_STREAM))


def sysctl_in(netns_path: str, name: str, value: str) -> None:
    """Set a per-namespace ``net.*`` sysctl of the namespace at ``netns_path``
    (``/proc/sys/net`` shows the namespace of the thread that opens it)."""
    path = "/proc/sys/" + name.replace(".", "/")

    def write() -> None:
        with open(path, "w") as f:
            f.write(value)

    run_in(netns_path, write)


async def connect_in(netns_path: str, host: str, port: int) -> socket.socket:
    """A non-blocking socket connected to ``host:port`` inside the namespace."""
    loop = asyncio.get_running_loop()
    sock = await loop.run_in_executor(None, socket_in, netns_path)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        await loop.sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def create_connection(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], _Protocol],
    host: str,
    port: int,
    netns: str | None,
) -> tuple[asyncio.BaseTransport, _Protocol]:
    """``loop.create_connection``, inside ``netns`` when it is set."""
    if netns is None:
        return await loop.create_connection(factory, host, port)
    sock = await connect_in(netns, host, port)
    return await loop.create_connection(factory, sock=sock)


def home_prefix(home_root: Path | str) -> str:
    """The first part of every namespace name of one home."""
    return f"{PREFIX}{contract.home_id(home_root)[:10]}-"


def name_for(home_root: Path | str, service: str, replica_id: int) -> str:
    """The namespace of one replica: found again from its row after a restart."""
    digest = hashlib.sha256(service.encode()).hexdigest()[:8]
    return f"{home_prefix(home_root)}{digest}-{replica_id}"


def of_home(home_root: Path | str) -> list[str]:
    """Every namespace this home made that still exists."""
    prefix = home_prefix(home_root)
    with contextlib.suppress(OSError):
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))
    return []
