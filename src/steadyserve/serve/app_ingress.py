"""Which service hosts an application's ingress, asked of the controller: what
``serve.get_app_handle`` resolves, in a driver or inside a replica (which asks
with its routes-only token, never holding the API's), and the application's docs
path, Ray's ``docs_path`` of an application (its FastAPI ingress's docs URL).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from steadyserve.compat.ray_deployment import name_safe
from steadyserve.home import unix_socket
from steadyserve.home.paths import Home
from steadyserve.serve import handle as handles
from steadyserve.serve.exceptions import RayServeException
from steadyserve.wire import replica_contract as contract
from steadyserve.wire.routes import DOCS_PATH_QUERY, app_ingress_url


def docs_path(name: str) -> str | None:
    """Ray's docs path of application ``name``: where its ingress's FastAPI app serves
    its docs (``docs_url``), as a running replica of it reports; None for another
    ASGI app, an application without an ingress app, or none running."""
    found = lookup(name_safe(name) or "default", docs=True)
    path = found.get("docs_path") if found is not None else None
    return path if isinstance(path, str) else None


def lookup(app: str, docs: bool = False) -> dict[str, Any] | None:
    """The controller's ``{service, deployment}`` for ``app``'s ingress (and its
    ``docs_path`` when ``docs``); None if it has none."""
    controller_file = os.environ.get(contract.CONTROLLER_FILE)
    token = os.environ.get(contract.ROUTES_TOKEN)
    if controller_file and token:  # a replica
        where = Home(Path(controller_file).parent)
    elif os.environ.get(handles.GRAPH_ROUTES):
        raise RayServeException(
            "serve.get_app_handle needs the controller: this replica follows"
            f" {handles.GRAPH_ROUTES} only"
        )
    else:
        from steadyserve.serve import api  # api imports this module

        api.client()  # starts the controller as a driver does
        where = api.home()
        token = contract.routes_token(where.root)
    headers = {"Authorization": f"Bearer {token}"}
    # An isolated replica: the host's loopback is out of reach, and the home's
    # controller.json is not in its sandbox.
    routes_socket = os.environ.get(contract.ROUTES_SOCKET)
    url = "the routes socket" if routes_socket else where.controller_url()
    if url is None:
        raise RayServeException(f"no controller is recorded in {where.root}")
    query = f"?{DOCS_PATH_QUERY}=1" if docs else ""
    try:
        if routes_socket:
            target = app_ingress_url("", app) + query
            status, body = _get_over_unix(routes_socket, target, headers)
        else:
            status, body = _get(app_ingress_url(url, app) + query, headers)
        if status == 404:
            return None
        if status != 200:
            raise RayServeException(f"the controller answered {status} for application {app!r}")
        found = json.loads(body)
    except (OSError, ValueError) as exc:
        raise RayServeException(f"cannot ask the controller at {url}: {exc}") from None
    return found if isinstance(found, dict) and found.get("service") else None


def _get(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10.0) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""


def _get_over_unix(path: str, target: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One GET over the controller's routes-only Unix socket (docs/isolation.md)."""

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(unix_socket.address(path))  # a long home's path too
            self.sock = sock

    conn = UnixConnection("localhost", timeout=10.0)
    try:
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        return int(response.status), response.read()
    finally:
        conn.close()
