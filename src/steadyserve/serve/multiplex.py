"""``@serve.multiplexed``: many models per replica, loaded on first use, LRU-evicted.

Ray Serve's semantics: ``await self.get_model(model_id)`` returns the loaded
model, loading it with the decorated ``async def`` on a miss; at most
``max_num_models_per_replica`` stay loaded (-1: no limit), and the least
recently used one is unloaded first, its ``__del__`` called (awaited when it is
a coroutine) so GPU memory goes back at once, not at garbage collection.
Concurrent calls for one model share one load. Routing requests to a replica
that holds their model is the router's job (``core/routing/multiplex.py``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from steadyserve.serve import context


class _Models:
    """One instance's loaded models, least recently used first."""

    def __init__(self, load: Callable[..., Any], owner: Any, limit: int) -> None:
        self.load = load
        self.owner = owner
        self.limit = limit
        self.models: OrderedDict[str, Any] = OrderedDict()
        self.loading: dict[str, asyncio.Future[Any]] = {}

    async def get(self, model_id: str) -> Any:
        if model_id in self.models:
            self.models.move_to_end(model_id)
            return self.models[model_id]
        pending = self.loading.get(model_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.loading[model_id] = future
        try:
            if self.limit > 0:
                while len(self.models) >= self.limit:
                    await self._unload(*self.models.popitem(last=False))
            args = (self.owner, model_id) if self.owner is not None else (model_id,)
            model = await self.load(*args)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: the callers get it from here
            raise
        finally:
            self.loading.pop(model_id, None)
        self.models[model_id] = model
        future.set_result(model)
        return model

    async def _unload(self, model_id: str, model: Any) -> None:
        delete = getattr(model, "__del__", None)
        if delete is None:
            return
        result = delete()
        if inspect.isawaitable(result):
            await result


def multiplexed(
    func: Callable[..., Any] | None = None, /, max_num_models_per_replica: int = 3
) -> Any:
    """``@serve.multiplexed`` or ``@serve.multiplexed(max_num_models_per_replica=N)``."""
    limit = max_num_models_per_replica
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError("max_num_models_per_replica must be an integer.")
    if limit != -1 and limit <= 0:
        raise ValueError("max_num_models_per_replica must be positive.")

    def decorate(load: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.iscoroutinefunction(load):
            raise TypeError("@serve.multiplexed can only be used to decorate async functions")
        params = list(inspect.signature(load).parameters)
        is_method = bool(params) and params[0] == "self"
        if len(params) != (2 if is_method else 1):
            raise TypeError(
                "@serve.multiplexed can only be used to decorate functions or methods "
                "with exactly one 'model_id: str' argument."
            )
        attr = f"__steady_models_{load.__name__}"
        shared: list[_Models] = []

        @functools.wraps(load)
        async def get(*args: Any) -> Any:
            owner = args[0] if is_method else None
            model_id = args[1] if is_method else (args[0] if args else "")
            if not isinstance(model_id, str):
                raise TypeError(f"the model id must be a string, got {model_id!r}")
            if owner is None:
                if not shared:
                    shared.append(_Models(load, None, limit))
                models = shared[0]
            else:
                models = owner.__dict__.get(attr)
                if models is None:
                    models = owner.__dict__.setdefault(attr, _Models(load, owner, limit))
            return await models.get(model_id)

        return get

    if func is not None:
        return decorate(func)
    return decorate


def get_multiplexed_model_id() -> str:
    return context.get_multiplexed_model_id()
