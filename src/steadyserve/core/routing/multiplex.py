"""Model multiplexing's routing: a request naming a model goes where that model is.

Ray Serve sends a request with a ``serve_multiplexed_model_id`` to a replica that
has the model loaded, when one has room, so models load once and stay warm;
otherwise to the least loaded replica, which then loads it. This policy keeps
that picture itself: where it sent each model is where the model is loaded
(each replica loads on first use and keeps its ``max_num_models_per_replica``
most recently used, which this memory mirrors with the same LRU). It is a
request-aware policy of the one interface: ``request_key`` names the header, and
``choose(..., key=model_id)`` decides; without a key it is its fallback.

Pure: no I/O, no clock; its memory is a function of the choices it made.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Sequence

from steadyserve.core.routing.policies import NO_EXCLUDE, NO_KEY, C, LeastLoad, Policy

MODEL_ID_HEADER = "serve_multiplexed_model_id"
DEFAULT_MODELS_PER_REPLICA = 3  # Ray's default max_num_models_per_replica


class ModelAffinity:
    """Prefer a replica that holds the request's model; else ``fallback`` picks, and
    the model is remembered there (evicting that replica's least recently used)."""

    name = "multiplex"
    request_key: str | None = f"header:{MODEL_ID_HEADER}"

    def __init__(
        self,
        fallback: Policy | None = None,
        models_per_replica: int = DEFAULT_MODELS_PER_REPLICA,
    ) -> None:
        self.fallback: Policy = fallback if fallback is not None else LeastLoad()
        self.models_per_replica = max(1, models_per_replica)
        # replica id -> its models, least recently used first
        self.loaded: dict[int, OrderedDict[str, None]] = {}

    def holders(self, model_id: str) -> list[int]:
        return [rid for rid, models in self.loaded.items() if model_id in models]

    def choose(
        self,
        candidates: Sequence[C],
        max_ongoing: int,
        exclude: Container[int] = NO_EXCLUDE,
        key: object = NO_KEY,
    ) -> C | None:
        if not isinstance(key, str) or not key:
            return self.fallback.choose(candidates, max_ongoing, exclude)
        present = {c.id for c in candidates}
        for gone in [rid for rid in self.loaded if rid not in present]:
            del self.loaded[gone]  # a replica that left took its models with it
        holding = [
            c
            for c in candidates
            if key in self.loaded.get(c.id, ())
            and c.id not in exclude
            and (max_ongoing <= 0 or c.inflight < max_ongoing)
        ]
        if holding:
            picked = min(holding, key=lambda c: c.inflight)
        else:
            found = self.fallback.choose(candidates, max_ongoing, exclude)
            if found is None:
                return None
            picked = found
        self._touch(picked.id, key)
        return picked

    def _touch(self, replica_id: int, model_id: str) -> None:
        models = self.loaded.setdefault(replica_id, OrderedDict())
        models[model_id] = None
        models.move_to_end(model_id)
        while len(models) > self.models_per_replica:
            models.popitem(last=False)
