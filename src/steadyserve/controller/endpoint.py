"""A service's endpoint port: the one its load balancer listens on for clients.

``service.port`` when the file sets it (refused when taken), else the first
free port from 30001 up; and a one-line notice when that was not 30001, so a
client told to use 30001 does not reach whatever holds it.
"""

from __future__ import annotations

import socket
from collections.abc import Collection

from steadyserve.controller.errors import BadInput
from steadyserve.state import Store

FIRST_ENDPOINT_PORT = 30001


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def endpoint_port(
    store: Store, requested: int | None, chosen: Collection[int] = frozenset()
) -> int:
    """``chosen``: ports of services being created but not recorded yet."""
    taken = {r.port for r in store.services()} | set(chosen)
    if requested is not None:
        if requested in taken or not port_is_free(requested):
            raise BadInput(f"service.port: port {requested} is already in use")
        return requested
    port = FIRST_ENDPOINT_PORT
    while port in taken or not port_is_free(port):
        port += 1
        if port > 65535:
            raise BadInput(f"service.port: no free port from {FIRST_ENDPOINT_PORT} up")
    return port


def port_notice(store: Store, port: int) -> str | None:
    """Why a service without service.port did not get the first endpoint port."""
    if port == FIRST_ENDPOINT_PORT:
        return None
    owner = next((r.name for r in store.services() if r.port == FIRST_ENDPOINT_PORT), None)
    holder = f"the endpoint of service {owner}" if owner else "in use by another process"
    return f"{FIRST_ENDPOINT_PORT} is {holder}: using {port} (service.port sets it)"
