"""A handle's own small load balancer: one callee service's replicas, called directly.

The route table comes from the controller's long-poll, the one the service's
load balancer reads, so a handle sees a rolling update as the
load balancer does: new replicas appear, draining ones disappear within
milliseconds. Replicas are picked by the service's own policy (``core/routing``)
under its ``max_ongoing_requests``, counting this process's calls.

A call is retried on another replica only when the chosen one gave no answer:
the connection was refused, closed before any answer (a replica stopping; a
crash mid-method looks the same, docs/ray-serve-api.md says so), or the runner
answered 503 at ``max_ongoing_requests``. When no replica is
eligible the call waits for the table to change, up to ``wait_s``.

From a replica in its own network namespace the table comes from the
controller's routes-only Unix socket and calls go to the callees' Unix sockets
(unix_calls.py): the host's loopback is out of reach there. A callee replica in
a namespace of its own is called at its Unix socket from anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp

from steadyserve.core.routing.multiplex import ModelAffinity
from steadyserve.core.routing.policies import Policy
from steadyserve.core.routing.registry import make_policy
from steadyserve.home.paths import Home
from steadyserve.serve import wire
from steadyserve.serve.unix_calls import BASE_URL, UnixSessions
from steadyserve.wire.routes import ReplicaRoute, RouteTable, service_url

log = logging.getLogger("steadyserve.serve")

RETRY_PAUSE_S = 0.05
POLL_WAIT_S = 25
MIN_BACKOFF_S = 0.2
MAX_BACKOFF_S = 1.0
WAKE_EVERY_S = 1.0


class NoReplicaError(RuntimeError):
    """No replica of the callee took the call within the wait."""


@dataclass
class _Candidate:
    """A replica as the service's policy sees it from this process (its own calls)."""

    id: int
    inflight: int
    version: int
    capacity: float
    accelerator: str | None


class ServiceRouter:
    """The replicas of one service as this process sees them, and its calls to them."""

    def __init__(self, service: str, session: aiohttp.ClientSession, wait_s: float) -> None:
        self.service = service
        self.session = session
        self.wait_s = wait_s
        self.table: RouteTable | None = None
        self.policy: Policy = make_policy("least_load")
        # Calls naming a multiplexed model go where that model is loaded: by the
        # replicas' reports (the table's) and where this process sent it.
        self.models: dict[int, frozenset[str]] = {}
        self.affinity = ModelAffinity(self.policy, reported=self.models)
        self.inflight: dict[int, int] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._home: Home | None = None
        self._auth: dict[str, str] = {}
        self._woke_at = -WAKE_EVERY_S
        self._wake_task: asyncio.Future[None] | None = None
        # In a network namespace of its own: the routes socket, and Unix sockets to call.
        self._routes_socket: str | None = None
        self._unix = UnixSessions()
        self._closing: asyncio.Future[None] | None = None

    def start(
        self,
        home: Home | None,
        static: str | None,
        token: str | None = None,
        routes_socket: str | None = None,
    ) -> None:
        """Follow the controller's table for the service, or use fixed addresses.
        ``routes_socket``: this process is in a network namespace of its own, so the
        table comes from there and calls go to the callees' Unix sockets."""
        if static is not None:
            self.apply(RouteTable.static(static, "least_load", 0, 0))
        elif home is not None:
            self._home = home
            self._auth = {"Authorization": f"Bearer {token}"} if token else {}
            self._routes_socket = routes_socket
            self._task = asyncio.ensure_future(self._follow(home))

    def _controller(self, home: Home) -> tuple[aiohttp.ClientSession, str | None]:
        """The session and base URL the controller's routes calls go to."""
        if self._routes_socket is not None:
            return self._unix.session(self._routes_socket), BASE_URL
        return self.session, home.controller_url()

    def _call_target(self, replica: ReplicaRoute) -> tuple[aiohttp.ClientSession, str]:
        """Where a call to ``replica`` goes: its address, or its app server's Unix
        socket under the home when either side is in a network namespace of its own
        (its address is then on a loopback the other side does not share)."""
        isolated = self._routes_socket is not None or replica.netns is not None
        if isolated and self._home is not None:
            path = str(self._home.call_socket(self.service, replica.id))
            return self._unix.session(path), BASE_URL + wire.CALL_PATH
        return self.session, f"http://{replica.host}:{replica.port}{wire.CALL_PATH}"

    async def _follow(self, home: Home) -> None:
        """Long-poll the table as the service's load balancer does (``RouteClient``),
        with the replica's routes-only token; keep the last table through failures.
        The controller's address is re-read each time: a restarted one moves."""
        known = ""
        backoff = MIN_BACKOFF_S
        headers = self._auth
        while True:
            try:
                session, url = self._controller(home)
                if url is None:
                    raise ValueError("no controller recorded in STEADY_HOME")
                target = service_url(url, self.service, "routes")
                query = f"?known={quote(known, safe=':')}&wait={POLL_WAIT_S}"
                timeout = aiohttp.ClientTimeout(total=POLL_WAIT_S + 10)
                async with session.get(
                    target + query, headers=headers, timeout=timeout
                ) as response:
                    if response.status != 200:
                        raise ValueError(f"routes poll answered {response.status}")
                    table = RouteTable.from_json(json.loads(await response.read()))
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                log.debug("route poll for %s failed: %s", self.service, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = MIN_BACKOFF_S
            if table.key != known:
                self.apply(table)
                known = table.key

    def apply(self, table: RouteTable) -> None:
        if self.table is None or self.table.policy != table.policy:
            self.policy = make_policy(table.policy)
            self.affinity = ModelAffinity(
                self.policy, self.affinity.models_per_replica, reported=self.models
            )
        present = {r.id for r in table.replicas}
        for gone in [rid for rid in self.affinity.loaded if rid not in present]:
            self.affinity.forget(gone)  # a replica that left took its models with it
        self.models.clear()
        self.models.update((r.id, r.models) for r in table.replicas if r.models is not None)
        self.table = table
        self._forget_idle()
        self._wake()

    def replica_models(self) -> dict[int, frozenset[str]]:
        """Replica id -> the model ids it reports holding, for each routable replica
        (empty for one that reported none): Ray's router's ``multiplexed_model_ids``."""
        table = self.table
        if table is None:
            return {}
        return {r.id: r.models or frozenset() for r in table.replicas}

    def _forget_idle(self) -> None:
        """Close the Unix sessions of replicas that left the table with no call on them."""
        if not self._unix.paths() or self._home is None or self.table is None:
            return
        keep = {self._routes_socket} if self._routes_socket is not None else set()
        keep |= {str(self._home.call_socket(self.service, r.id)) for r in self.table.replicas}
        keep |= {str(self._home.call_socket(self.service, rid)) for rid in self.inflight}
        for path in self._unix.paths() - keep:
            self._unix.drop(path)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def post(
        self, headers: Mapping[str, str], body: bytes, key: str | None = None
    ) -> tuple[ReplicaRoute, aiohttp.ClientResponse]:
        """Send the call to a replica that takes it; the caller must ``release`` it.
        ``key``: the call's multiplexed model id, if any."""
        deadline = time.monotonic() + self.wait_s
        exclude: set[int] = set()
        while True:
            replica = self._choose(exclude, key)
            if replica is None:
                self._wake_from_zero()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NoReplicaError(self._why_none())
                changed = self._changed
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(left, 0.5))
                if not changed.is_set():
                    exclude.clear()  # no news in a while: try everyone again
                continue
            self.inflight[replica.id] = self.inflight.get(replica.id, 0) + 1
            try:
                session, url = self._call_target(replica)
                response = await session.post(url, data=body, headers=dict(headers))
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
                # Refused or closed before an answer: the replica is gone or going.
                log.debug("handle call to %s replica %d: %s", self.service, replica.id, exc)
                self.release(replica)
                exclude.add(replica.id)
                await asyncio.sleep(RETRY_PAUSE_S if len(exclude) > 1 else 0)
                continue
            if response.status == 503 and response.content_type != wire.CONTENT_TYPE:
                response.release()  # the runner's max_ongoing_requests answer: not taken
                self.release(replica)
                exclude.add(replica.id)
                continue
            return replica, response

    def _wake_from_zero(self) -> None:
        """At zero replicas a load balancer asks the controller for one; a handle
        bypasses the load balancer, so it asks too (at most once a second)."""
        table = self.table
        if table is None or table.replicas or table.hold_at_zero_s <= 0 or self._home is None:
            return
        now = time.monotonic()
        if now - self._woke_at < WAKE_EVERY_S:
            return
        self._woke_at = now
        try:
            session, url = self._controller(self._home)
        except aiohttp.ClientConnectionError as exc:  # no routes socket to ask at
            log.debug("wake for %s failed: %s", self.service, exc)
            return
        if url is not None:
            self._wake_task = asyncio.ensure_future(
                self._post_wake(session, service_url(url, self.service, "wake"))
            )

    async def _post_wake(self, session: aiohttp.ClientSession, url: str) -> None:
        try:
            async with session.post(
                url, data=b"{}", headers=self._auth, timeout=aiohttp.ClientTimeout(total=5)
            ) as response:
                await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.debug("wake for %s failed: %s", self.service, exc)

    def release(self, replica: ReplicaRoute) -> None:
        count = self.inflight.get(replica.id, 0) - 1
        if count > 0:
            self.inflight[replica.id] = count
        else:
            self.inflight.pop(replica.id, None)
            self._forget_idle()
        self._wake()

    def _choose(self, exclude: set[int], key: str | None = None) -> ReplicaRoute | None:
        table = self.table
        if table is None or not table.replicas:
            return None
        candidates = [
            _Candidate(r.id, self.inflight.get(r.id, 0), r.version, r.capacity, r.accelerator)
            for r in table.replicas
        ]
        if key:
            picked = self.affinity.choose(candidates, table.max_ongoing_requests, exclude, key)
        else:
            picked = self.policy.choose(candidates, table.max_ongoing_requests, exclude)
        if picked is None:
            return None
        return next(r for r in table.replicas if r.id == picked.id)

    def _why_none(self) -> str:
        if self.table is None:
            return (
                f"no route table for service {self.service!r} within {self.wait_s:g}s "
                f"(is it deployed, and is the controller running?)"
            )
        if not self.table.replicas:
            return f"service {self.service!r} has no ready replica after {self.wait_s:g}s"
        return f"no replica of {self.service!r} took the call within {self.wait_s:g}s"

    def stop(self) -> None:
        """Stop following the table (on the runtime's loop)."""
        if self._task is not None:
            self._task.cancel()
        self._closing = asyncio.ensure_future(self._unix.close())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self._unix.close()
