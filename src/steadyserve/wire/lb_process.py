"""What the controller hands a load-balancer process when it starts one.

The controller (controller/lb_process.py) binds the endpoint's listening sockets
and keeps them open, so connections wait in a socket's backlog while a worker
restarts; it passes the TLS files in the environment. The load balancer
(lb/workers.py, lb/tls.py) reads the same names: both sides import them from here.
"""

from __future__ import annotations

import os
import socket
from typing import Protocol

KEYFILE_ENV = "STEADY_LB_TLS_KEYFILE"
CERTFILE_ENV = "STEADY_LB_TLS_CERTFILE"
AUTH_KEY_ENV = "STEADY_LB_AUTH_KEY"
"""``service.auth_key``: in the environment (read by the owner and root only), never
on the command line, which every local user can read."""


class TlsFiles(Protocol):
    """``service.tls``: what the load balancer terminates TLS with."""

    @property
    def keyfile(self) -> str: ...
    @property
    def certfile(self) -> str: ...


def env_for(tls: TlsFiles | None, auth_key: str | None = None) -> dict[str, str]:
    """The LB process's environment entries for ``service.tls``'s files and the
    service's ``auth_key`` ({} without either): the LB reads both at its start."""
    env = {AUTH_KEY_ENV: auth_key} if auth_key is not None else {}
    if tls is None:
        return env
    return {**env, KEYFILE_ENV: tls.keyfile, CERTFILE_ENV: tls.certfile}


def worker_count(value: int | str) -> int:
    """``service.load_balancer.workers`` as a count: ``auto`` is half the usable cores."""
    if value == "auto":
        return max(1, len(os.sched_getaffinity(0)) // 2)
    return max(1, int(value))


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A listening socket that other SO_REUSEPORT sockets may share the port with."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(4096)
    except OSError:
        sock.close()
        raise
    return sock
