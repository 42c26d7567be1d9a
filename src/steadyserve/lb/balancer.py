"""Per-replica state and the routing table as the data path sees it.

The balancer owns what outlives a single request: each replica's in-flight and
cumulative counts, its pool of idle keep-alive connections, local ejections after
a refused connection, and the policy. It does no socket work of its own (closing
pooled connections aside), so the proxy stays the only place where I/O happens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

from steadyserve.core.canary.weighted import SmoothWeighted
from steadyserve.core.routing.multiplex import ModelAffinity
from steadyserve.core.routing.options import DEFAULT_OPTIONS, PolicyOptions
from steadyserve.core.routing.policies import NO_EXCLUDE, NO_KEY, Policy
from steadyserve.core.routing.registry import make_policy
from steadyserve.lb.pool import IDLE_HOLD
from steadyserve.lb.request_key import Extractor, extractor
from steadyserve.wire.routes import ReplicaRoute, RouteTable

if TYPE_CHECKING:
    from steadyserve.lb.upstream import UpstreamConnection

EJECT_SECONDS = 1.0


class ReplicaState:
    """One replica as the proxy tracks it; lives while routable or still busy."""

    __slots__ = (
        "accelerator",
        "capacity",
        "errors",
        "host",
        "id",
        "idle",
        "idle_cap",
        "idle_hold",
        "in_table",
        "inflight",
        "netns",
        "port",
        "queue",
        "requests",
        "version",
    )

    def __init__(self, route: ReplicaRoute) -> None:
        self.id = route.id
        self.version = route.version
        self.host = route.host
        self.port = route.port
        self.netns = route.netns
        self.capacity = route.capacity
        self.accelerator = route.accelerator
        self.inflight = 0
        self.requests = 0
        self.errors = 0
        self.in_table = True
        self.idle: list[UpstreamConnection] = []
        # How long a connection may stay pooled (lb/pool.py): less than the
        # replica's own idle timeout, once its Keep-Alive header announced one.
        self.idle_hold = IDLE_HOLD
        self.idle_cap = float("inf")  # the shortest idle time it was seen closing at, x0.8
        # The replica's own queue gauge while a scrape of it is fresh
        # (replica_metrics.py); the request-aware policies prefer it to ``inflight``.
        self.queue: float | None = None

    def close_idle(self) -> None:
        """Close every pooled connection (replica left the table or refused us)."""
        idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()

    def __repr__(self) -> str:
        return f"<replica {self.id} {self.host}:{self.port} inflight={self.inflight}>"


class Balancer:
    """The routable replicas, their counts, and the policy that picks among them."""

    def __init__(
        self,
        table: RouteTable | None,
        policy: str = "least_load",
        max_ongoing: int = 100,
        max_queued: int = -1,
        clock: Callable[[], float] = time.monotonic,
        eject_seconds: float = EJECT_SECONDS,
    ) -> None:
        self.table: RouteTable | None = None
        self.replicas: list[ReplicaState] = []
        self.known: dict[int, ReplicaState] = {}
        self.options: PolicyOptions = DEFAULT_OPTIONS
        self.policy: Policy = make_policy(policy)
        # A multiplexed service's (the table says): replica id -> the model ids it
        # reports, read by every ModelAffinity of this balancer; updated in place.
        self.multiplexed = False
        self.models: dict[int, frozenset[str]] = {}
        # What the policy reads from a request (None: nothing, the usual case).
        self.read_key: Extractor | None = None
        self.max_ongoing = max_ongoing
        self.max_queued = max_queued
        self._clock = clock
        self.eject_seconds = eject_seconds
        self._ejected: dict[int, float] = {}
        self.ejections = 0  # for the metrics
        # Per-version pools: for a pinned request (X-Steady-Version) and for weights.
        self.pools: dict[int, list[ReplicaState]] = {}
        # One policy per pool: a policy's own state (a rotating start) is per list.
        self._pool_policies: dict[int, Policy] = {}
        # A canary's weights: the exact choice between version pools; None when the
        # table has no weights (then every routable replica is alike, as before).
        self._chooser: SmoothWeighted | None = None
        self._weighted: list[ReplicaState] = []
        self._all_pooled = True
        if table is not None:
            self.apply(table)

    # -- table -----------------------------------------------------------------
    def apply(self, table: RouteTable) -> None:
        """Switch to ``table``. Replicas that left keep their in-flight requests."""
        routable: list[ReplicaState] = []
        for route in table.replicas:
            state = self.known.get(route.id)
            if state is not None and (state.host, state.port, state.netns) != (
                route.host,
                route.port,
                route.netns,
            ):
                self._retire(state)
                state = None
            if state is None:
                state = ReplicaState(route)
                self.known[route.id] = state
            state.in_table = True
            state.version = route.version
            state.capacity = route.capacity
            state.accelerator = route.accelerator
            routable.append(state)
        ids = {r.id for r in routable}
        for state in list(self.known.values()):
            if state.id not in ids:
                self._retire(state)
        self.replicas = routable
        self.models.clear()
        self.models.update((r.id, r.models) for r in table.replicas if r.models is not None)
        rebuild = table.multiplexed != self.multiplexed
        self.multiplexed = table.multiplexed
        self._apply_weights(table, rebuild)
        if rebuild or table.policy != self.policy.name or table.options != self.options:
            self.options = table.options
            self.policy = self._make_policy(table)
        key = self.policy.request_key
        self.read_key = None if key is None else extractor(key, self.options)
        self.max_ongoing = table.max_ongoing_requests
        self.max_queued = table.max_queued_requests
        self.table = table

    def _make_policy(self, table: RouteTable) -> Policy:
        """The table's policy; a multiplexed service's routes by model id first (the
        header is read only then: other services' requests are not looked at)."""
        policy = make_policy(table.policy, options=table.options)
        return ModelAffinity(policy, reported=self.models) if table.multiplexed else policy

    def _apply_weights(self, table: RouteTable, rebuild: bool = False) -> None:
        pools: dict[int, list[ReplicaState]] = {}
        for state in self.replicas:
            pools.setdefault(state.version, []).append(state)
        self.pools = pools
        policies = self._pool_policies
        for version in list(policies):
            if rebuild or version not in pools or policies[version].name != table.policy:
                del policies[version]
        for version in pools:
            if version not in policies:
                policies[version] = self._make_policy(table)
        weights = dict(table.weights)
        if not weights:
            self._chooser = None
            self._weighted = []
            return
        if self._chooser is None or self._chooser.weights != {
            v: w for v, w in weights.items() if w > 0
        }:
            # Keep the chooser across tables with the same weights, so the share
            # stays exact while replicas come and go.
            self._chooser = SmoothWeighted(weights)
        self._weighted = [r for r in self.replicas if weights.get(r.version, 0) > 0]
        self._all_pooled = all(v in pools for v, w in weights.items() if w > 0)

    def _retire(self, state: ReplicaState) -> None:
        state.in_table = False
        # Its affinities move: the policies forget what they sent there.
        self.policy.forget(state.id)
        for policy in self._pool_policies.values():
            policy.forget(state.id)
        state.close_idle()
        self._ejected.pop(state.id, None)
        if state.inflight == 0 and self.known.get(state.id) is state:
            del self.known[state.id]

    # -- routing ---------------------------------------------------------------
    def excluded(self, tried: set[int] | None) -> Container[int]:
        """Replicas a request may not use: the ones it tried plus the ejected ones."""
        if self._ejected:
            now = self._clock()
            for rid, until in list(self._ejected.items()):
                if until <= now:
                    del self._ejected[rid]
            if self._ejected:
                return self._ejected.keys() | tried if tried else self._ejected.keys()
        return tried if tried else NO_EXCLUDE

    def choose(
        self, tried: set[int] | None, pin: int | None = None, key: object = NO_KEY
    ) -> ReplicaState | None:
        """Pick a replica and take one of its slots, or None if none is eligible.

        ``pin``: only a replica of that version (the X-Steady-Version header).
        With weights, the version pool is chosen first (exactly by weight), then
        a replica in it by the policy; a pool with no free replica hands the
        request to the next weighted pool rather than holding it.
        """
        if pin is not None or self._chooser is not None:
            replica = self._choose_pool(tried, pin, key)
        elif tried or self._ejected:
            replica = self.policy.choose(self.replicas, self.max_ongoing, self.excluded(tried), key)
        else:
            replica = self.policy.choose(self.replicas, self.max_ongoing, NO_EXCLUDE, key)
        if replica is not None:
            replica.inflight += 1
        return replica

    def _choose_pool(
        self, tried: set[int] | None, pin: int | None, key: object = NO_KEY
    ) -> ReplicaState | None:
        excluded = self.excluded(tried) if tried or self._ejected else NO_EXCLUDE
        pools = self.pools
        policies = self._pool_policies
        if pin is not None:
            pool = pools.get(pin)
            return policies[pin].choose(pool, self.max_ongoing, excluded, key) if pool else None
        chooser = self._chooser
        assert chooser is not None
        # Every weighted version has replicas (the usual case): no per-pick check.
        version = chooser.pick(None if self._all_pooled else pools.__contains__)
        if version is None:
            return None
        replica = policies[version].choose(pools[version], self.max_ongoing, excluded, key)
        if replica is None:
            # That pool is full or ejected: another weighted pool takes the request.
            for other, _ in sorted(chooser.weights.items(), key=lambda kv: -kv[1]):
                if other != version and other in pools:
                    replica = policies[other].choose(pools[other], self.max_ongoing, excluded, key)
                    if replica is not None:
                        break
        return replica

    def has_candidate(self, tried: set[int] | None, pin: int | None = None) -> bool:
        """Whether some replica could take the request once a slot frees up."""
        excluded = self.excluded(tried)
        if pin is not None:
            candidates = self.pools.get(pin, ())
        elif self._chooser is not None:
            candidates = self._weighted
        else:
            candidates = self.replicas
        return any(r.id not in excluded for r in candidates)

    def weights(self) -> dict[int, int]:
        """The weights in force ({} when the table has none), for the report."""
        return self._chooser.weights if self._chooser is not None else {}

    def release(self, replica: ReplicaState) -> None:
        """Give back a slot taken by ``choose``."""
        replica.inflight -= 1
        if replica.inflight == 0 and not replica.in_table and self.known.get(replica.id) is replica:
            del self.known[replica.id]

    def eject(self, replica: ReplicaState) -> None:
        """Stop routing to ``replica`` for a moment: its port refused a connection."""
        self._ejected[replica.id] = self._clock() + self.eject_seconds
        self.ejections += 1
        replica.close_idle()

    # -- reporting ---------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Counts of every replica in the table or still busy, keyed by str(id)."""
        states = list(self.known.values())
        return {
            "table": self.table.key if self.table is not None else "",
            "inflight": {str(s.id): s.inflight for s in states},
            "requests": {str(s.id): s.requests for s in states},
            "errors": {str(s.id): s.errors for s in states},
        }
