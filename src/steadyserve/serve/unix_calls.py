"""Handle traffic from a replica in its own network namespace: Unix sockets by path.

Such a replica (``service.isolation: network``) has no way to the host's
loopback, so its handles cannot reach the controller's port or other replicas'
``host:port``. The file system is shared, and a path-based Unix socket is
reached from any network namespace: the controller's routes-only socket serves
the route tables, and every Python replica's app server also listens on its
``Home.call_socket`` (docs/isolation.md). The calls themselves are the same
HTTP as over TCP.

aiohttp's ``UnixConnector`` connects to one path, so there is one session per
path: the routes socket's, and one per callee replica. A home's path may be too
long for ``sun_path``: the session then connects to the same file through its
directory's descriptor (``unix_socket.address``). A replica's session is
closed once it left the route table and no call of this process is on it
(closing it earlier would cut the answers of a replica that is draining).
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from steadyserve.home import unix_socket

BASE_URL = "http://localhost"
"""The host part of a URL sent over a Unix socket (the socket is the address)."""


class UnixSessions:
    """aiohttp sessions keyed by socket path, made on first use."""

    def __init__(self) -> None:
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def session(self, path: str) -> aiohttp.ClientSession:
        """On the handles' loop only. Raises ``aiohttp.ClientConnectionError`` when
        the socket's directory is missing or not this user's (nobody to call there)."""
        try:
            where = unix_socket.address(path)
        except OSError as exc:
            raise aiohttp.ClientConnectionError(f"{path}: {exc}") from None
        found = self._sessions.get(path)
        connector = None if found is None else found.connector
        if found is not None and (
            not isinstance(connector, aiohttp.UnixConnector) or connector.path != where
        ):
            self.drop(path)  # its directory was made anew: another descriptor
            found = None
        if found is None or found.closed:
            # One connection per call, as over TCP: a stopping replica never gets a
            # call on a kept-alive connection it is about to close.
            connector = aiohttp.UnixConnector(path=where, force_close=True, limit=0)
            found = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None, connect=10)
            )
            self._sessions[path] = found
        return found

    def paths(self) -> set[str]:
        return set(self._sessions)

    def drop(self, path: str) -> None:
        """Close the session of ``path`` (its replica is gone and idle here)."""
        found = self._sessions.pop(path, None)
        if found is not None:
            task = asyncio.ensure_future(found.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for found in sessions:
            with contextlib.suppress(Exception):
                await found.close()
