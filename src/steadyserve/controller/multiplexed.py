"""Which multiplexed models each replica holds, as the controller learns it.

A Python replica whose code defines ``@serve.multiplexed`` lists its model ids,
loaded or loading, in its ``/-/info`` (serve/multiplex.py); the controller reads
``/-/info`` about once a second (controller/load.py) and the ids go into the
route table (``ReplicaRoute.models``, ``RouteTable.multiplexed``), so the load
balancer, the gateway and handles route a request naming a model to a replica
that has it. Ray Serve's replicas push the same to its controller, which
broadcasts it to the routers the same way.

Which replicas to read: every Python replica once, between its passing probe and
READY (service_health.learn_models: that answer says whether it is multiplexed at
all, before any table lists it), then only the multiplexed ones,
so a service that is not pays one read per replica, not one a second.

Bookkeeping only: no I/O, no clock; ``changed`` (the runtime's wake-up) is
called when the route table must change.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any

MODEL_IDS_FIELD = "multiplexed_model_ids"


def models_in(info: Mapping[str, Any]) -> frozenset[str] | None:
    """The model ids of one ``/-/info`` answer; None if it lists none (not multiplexed)."""
    ids = info.get(MODEL_IDS_FIELD)
    if not isinstance(ids, list):
        return None
    return frozenset(i for i in ids if isinstance(i, str))


class ModelReports:
    """Replica id -> the model ids it last reported, for the multiplexed ones."""

    def __init__(self, changed: Callable[[], None] = lambda: None) -> None:
        self.changed = changed
        self.models: dict[int, frozenset[str]] = {}
        self._read: set[int] = set()  # replicas whose /-/info answered at least once

    def wanted(self, replica_id: int) -> bool:
        """Whether to read this ready replica's ``/-/info`` for its models."""
        return replica_id not in self._read or replica_id in self.models

    def seen(self, replica_id: int, info: Mapping[str, Any]) -> None:
        """Record one ``/-/info`` answer; ``changed()`` if the replica's models did."""
        self._read.add(replica_id)
        models = models_in(info)
        if models is None:
            if self.models.pop(replica_id, None) is not None:
                self.changed()
        elif self.models.get(replica_id) != models:
            self.models[replica_id] = models
            self.changed()

    def keep(self, replica_ids: Container[int]) -> None:
        """Forget replicas no longer listed (stopped, failed, forgotten)."""
        for rid in [r for r in self._read if r not in replica_ids]:
            self._read.discard(rid)
            self.models.pop(rid, None)
