"""A service's endpoint port: the one its load balancer listens on for clients.

``service.port`` when the file sets it (refused when taken), else the first
free port from 30001 up; and a one-line notice when that was not 30001, so a
client told to use 30001 does not reach whatever holds it.

Choosing a free port is not enough when two controllers (two homes of one user)
choose at once: each finds 30001 free before either's load balancer binds it,
and both bind it, since their listeners share ports with SO_REUSEPORT (the
kernel lets sockets of one uid share a port). Clients then reach either service.
So a port is also *claimed*, for as long as its service lives, by binding an
abstract Unix socket named after it: at most one socket in a network namespace
holds a name, the kernel drops it with its holder, and a port claimed elsewhere
is skipped as a taken one.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection

from steadyserve.controller.errors import BadInput
from steadyserve.store import Store

FIRST_ENDPOINT_PORT = 30001


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


CLAIM_NAME = "\0steadyserve-endpoint-{port}"
"""The abstract socket (leading NUL: no file) that claims an endpoint port."""


def claim(port: int) -> socket.socket | None:
    """The claim of ``port``, or None when another process holds it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(CLAIM_NAME.format(port=port))
    except OSError:
        sock.close()
        return None
    return sock


def endpoint_port(
    store: Store, requested: int | None, chosen: Collection[int] = frozenset()
) -> int:
    """A port for a new service (checked, not claimed: a dry run's answer).

    ``chosen``: ports this controller holds for services not recorded yet."""
    return _choose(store, requested, chosen, lambda port: True)


def _choose(
    store: Store, requested: int | None, chosen: Collection[int], take: Callable[[int], bool]
) -> int:
    taken = {r.port for r in store.services()} | set(chosen)

    def free(port: int) -> bool:
        return port not in taken and port_is_free(port) and take(port)

    if requested is not None:
        if not free(requested):
            raise BadInput(f"service.port: port {requested} is already in use")
        return requested
    port = FIRST_ENDPOINT_PORT
    while not free(port):
        port += 1
        if port > 65535:
            raise BadInput(f"service.port: no free port from {FIRST_ENDPOINT_PORT} up")
    return port


class EndpointClaims:
    """The endpoint ports this controller's services hold, each with its claim."""

    def __init__(self) -> None:
        self._held: dict[int, socket.socket] = {}

    def choose(self, store: Store, requested: int | None) -> int:
        """A free port for a new service, claimed until :meth:`release`."""
        return _choose(store, requested, self._held, self.hold)

    def hold(self, port: int) -> bool:
        """Claim ``port`` (a recorded service's, when the controller starts): False
        when another process holds it."""
        if port in self._held:
            return True
        sock = claim(port)
        if sock is None:
            return False
        self._held[port] = sock
        return True

    def release(self, port: int) -> None:
        sock = self._held.pop(port, None)
        if sock is not None:
            sock.close()


def port_notice(store: Store, port: int) -> str | None:
    """Why a service without service.port did not get the first endpoint port."""
    if port == FIRST_ENDPOINT_PORT:
        return None
    owner = next((r.name for r in store.services() if r.port == FIRST_ENDPOINT_PORT), None)
    holder = f"the endpoint of service {owner}" if owner else "in use by another process"
    return f"{FIRST_ENDPOINT_PORT} is {holder}: using {port} (service.port sets it)"
