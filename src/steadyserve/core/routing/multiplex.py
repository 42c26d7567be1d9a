"""Model multiplexing's routing: a request naming a model goes where that model is.

Ray Serve sends a request with a ``serve_multiplexed_model_id`` to a replica that
has the model loaded, when one has room, so models load once and stay warm;
otherwise to the least loaded replica, which then loads it. Two sources say
where a model is:

- ``reported``: what each replica itself says it holds (loaded or loading), as
  the route table carries it (the controller reads the replicas' ``/-/info``,
  wire/routes.py ``ReplicaRoute.models``). It is the truth, about a second late,
  and it covers loads this router did not cause (another router's, a handle's).
- its own memory: where this router sent each model since, so the next request
  for a model follows the first one before the replica's report arrives. Each
  replica's memory keeps its ``models_per_replica`` most recently sent models,
  the replica's own LRU as far as this router can see it.

A replica holds a model if either says so. It is a request-aware policy of the
one interface: ``request_key`` names the header, ``choose(..., key=model_id)``
decides; without a key, ``fallback`` (the table's policy) picks unchanged.

Pure: no I/O, no clock; its memory is a function of the choices it made and
the reports it was given.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Mapping, Sequence

from steadyserve.core.routing.policies import (
    NO_EXCLUDE,
    NO_KEY,
    C,
    LeastLoad,
    Policy,
    inflight_of,
    least_loaded,
)

MODEL_ID_HEADER = "serve_multiplexed_model_id"
DEFAULT_MODELS_PER_REPLICA = 3  # Ray's default max_num_models_per_replica

NO_REPORTS: Mapping[int, frozenset[str]] = {}


def model_id_of(key: object) -> str | None:
    """The model id a request key names: the header's bytes (the load balancer) or a
    string (a handle's ``multiplexed_model_id``); None when it names none."""
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace") if key else None
    if isinstance(key, str):
        return key or None
    return None


class ModelAffinity:
    """Prefer the least loaded replica with room that holds the request's model;
    else ``fallback`` picks, and the model is remembered there."""

    request_key: str | None = f"header:{MODEL_ID_HEADER}"

    def __init__(
        self,
        fallback: Policy | None = None,
        models_per_replica: int = DEFAULT_MODELS_PER_REPLICA,
        reported: Mapping[int, frozenset[str]] = NO_REPORTS,
    ) -> None:
        self.fallback: Policy = fallback if fallback is not None else LeastLoad()
        # The table's policy name: the balancer compares it to rebuild on a change.
        self.name = self.fallback.name
        self.models_per_replica = max(1, models_per_replica)
        # Replica id -> the models it reports; the owner may update it in place.
        self.reported = reported
        # Replica id -> models this router sent there, least recently used first.
        self.loaded: dict[int, OrderedDict[str, None]] = {}

    def holders(self, model_id: str) -> list[int]:
        """Replica ids that hold ``model_id``, by report or by this router's memory."""
        ids = {rid for rid, models in self.loaded.items() if model_id in models}
        ids.update(rid for rid, models in self.reported.items() if model_id in models)
        return sorted(ids)

    def holds(self, replica_id: int, model_id: str) -> bool:
        mine = self.loaded.get(replica_id)
        if mine is not None and model_id in mine:
            return True
        theirs = self.reported.get(replica_id)
        return theirs is not None and model_id in theirs

    def choose(
        self,
        candidates: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        model_id = model_id_of(key)
        if model_id is None:
            return self.fallback.choose(candidates, max_ongoing, exclude)
        holders = [c for c in candidates if self.holds(c.id, model_id)]
        picked = least_loaded(holders, 0, inflight_of, max_ongoing, exclude)
        if picked is None:
            picked = self.fallback.choose(candidates, max_ongoing, exclude)
            if picked is None:
                return None
        self._touch(picked.id, model_id)
        return picked

    def forget(self, replica_id: int) -> None:
        """A replica that left took its models with it."""
        self.loaded.pop(replica_id, None)
        self.fallback.forget(replica_id)

    def _touch(self, replica_id: int, model_id: str) -> None:
        models = self.loaded.setdefault(replica_id, OrderedDict())
        models[model_id] = None
        models.move_to_end(model_id)
        while len(models) > self.models_per_replica:
            models.popitem(last=False)
