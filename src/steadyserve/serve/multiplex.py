"""``@serve.multiplexed``: many models per replica, loaded on first use, LRU-evicted.

Ray Serve's semantics: ``await self.get_model(model_id)`` returns the loaded
model, loading it with the decorated ``async def`` on a miss; at most
``max_num_models_per_replica`` stay loaded (-1: no limit), and the least
recently used one is unloaded first, its ``__del__`` called (awaited when it is
a coroutine, else run in a thread) so GPU memory goes back at once, not at
garbage collection. Loads run one at a time per wrapper, so concurrent misses
never hold more than the limit. A stopping replica unloads every model the same
way (:func:`shutdown`).

Each instance's LRU is a :class:`_ModelMultiplexWrapper` (Ray's name and
surface). What a replica holds, loaded or loading, is what its control
endpoint's ``/-/info`` answers as ``multiplexed_model_ids`` (:func:`report`):
the controller reads it and puts it in the route table, so the load balancer,
the gateway and handles send a request naming a model to a replica holding it
(``core/routing/multiplex.py``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from steadyserve.serve import context

log = logging.getLogger("steadyserve.serve")

_declared = False  # some @serve.multiplexed was defined in this process
_reporting: weakref.WeakSet[_ModelMultiplexWrapper] = weakref.WeakSet()


class _ReportRegistration:
    """Ray's ``metrics_pusher``: here the wrapper's place among those ``/-/info``
    reports; ``graceful_shutdown`` takes it out (its ids are then reported no more)."""

    def __init__(self, wrapper: _ModelMultiplexWrapper) -> None:
        self._wrapper = weakref.ref(wrapper)

    def start(self) -> None:
        wrapper = self._wrapper()
        if wrapper is not None:
            _reporting.add(wrapper)

    async def graceful_shutdown(self) -> None:
        wrapper = self._wrapper()
        if wrapper is not None:
            _reporting.discard(wrapper)


class _ModelMultiplexWrapper:
    """One instance's (or one module function's) loaded models, least recently used
    first, and the ones loading; Ray's constructor and attributes."""

    def __init__(
        self,
        model_load_func: Callable[..., Any] | None,
        self_arg: Any,
        max_num_models_per_replica: int,
    ) -> None:
        self.models: OrderedDict[str, Any] = OrderedDict()
        self._func = model_load_func
        self.self_arg = self_arg
        self.max_num_models_per_replica = max_num_models_per_replica
        try:
            replica = context.get_replica_context()
        except RuntimeError:
            raise RuntimeError(
                "`@serve.multiplex` can only be used within a deployment "
                "(failed to retrieve Serve replica context)."
            ) from None
        self._replica_id = replica.replica_id
        # Set when the held ids changed since they were last reported.
        self._push_multiplexed_replica_info = False
        self._model_cache_lock = asyncio.Lock()
        self._model_load_tasks: set[str] = set()
        self.metrics_pusher = _ReportRegistration(self)
        self.metrics_pusher.start()

    def _get_loading_and_loaded_model_ids(self) -> list[str]:
        """Loading ones count: a request for a model being loaded should go there."""
        return list(set(self.models) | self._model_load_tasks)

    def _push_model_ids_info(self) -> list[str]:
        """The ids to report, clearing the changed flag (they are reported now)."""
        self._push_multiplexed_replica_info = False
        return self._get_loading_and_loaded_model_ids()

    async def load_model(self, model_id: str) -> Any:
        if type(model_id) is not str:
            raise TypeError("The model ID must be a string.")
        if not model_id:
            raise ValueError("The model ID cannot be empty.")
        if model_id in self.models:
            self.models.move_to_end(model_id)
            return self.models[model_id]
        self._push_multiplexed_replica_info = True
        self._model_load_tasks.add(model_id)
        try:
            async with self._model_cache_lock:
                if model_id in self.models:  # another request loaded it meanwhile
                    return self.models[model_id]
                limit = self.max_num_models_per_replica
                if limit > 0 and len(self.models) >= limit:
                    await self.unload_model_lru()
                    self._push_multiplexed_replica_info = True
                assert self._func is not None
                args = (model_id,) if self.self_arg is None else (self.self_arg, model_id)
                model = await self._func(*args)
                self.models[model_id] = model
                return model
        finally:
            self._model_load_tasks.discard(model_id)

    async def unload_model_lru(self) -> None:
        """Unload the least recently used model, calling its ``__del__`` now."""
        model_id, model = self.models.popitem(last=False)
        log.info("unloading model %r", model_id)
        delete = getattr(model, "__del__", None)
        if delete is None:
            return
        try:
            if inspect.iscoroutinefunction(delete):
                await delete()
            else:
                await asyncio.get_running_loop().run_in_executor(None, delete)
        finally:
            disarm(model)

    async def shutdown(self) -> None:
        """Unload every model (the replica is stopping); one failing does not keep
        the others loaded."""
        while self.models:
            try:
                await self.unload_model_lru()
            except Exception:
                log.exception("unloading a model failed")


MULTIPLEXED_ATTR = "__steady_multiplexed__"


_spent: set[int] = set()
"""ids of live objects whose ``__del__`` was already called (an id is unique
while its object lives, and the garbage collector's call comes while it does)."""
_guarded: set[type] = set()


def disarm(obj: Any) -> None:
    """Make the garbage collector skip ``obj.__del__`` (it was just called), so a
    GPU is not freed twice, leaving ``type(obj)`` as it is (``type(model) is Cls``
    holds after eviction): the class's ``__del__`` is wrapped once to skip such
    objects. Classes that take no attribute (built-in or C types) are left as
    they are."""
    cls = type(obj)
    if cls not in _guarded:
        original = getattr(cls, "__del__", None)
        if original is None or inspect.iscoroutinefunction(original):
            return  # the collector's call of an async __del__ runs none of it

        def guard(self: Any) -> None:
            if not _spend(self):
                original(self)

        try:
            cls.__del__ = guard  # type: ignore[attr-defined]
        except (TypeError, AttributeError):  # a built-in or C type
            return
        _guarded.add(cls)
    _spent.add(id(obj))


def _spend(obj: Any) -> bool:
    """Whether ``obj``'s ``__del__`` was called already (then this call, the
    collector's, is skipped, and ``obj`` forgotten)."""
    if id(obj) not in _spent:
        return False
    _spent.discard(id(obj))
    return True


def declared() -> bool:
    """Whether this process defined a ``@serve.multiplexed`` function, or hosts a
    class with one (a class shipped by pickle brings its methods ready-made:
    their decorator does not run again here)."""
    return _declared


def declare_from(cls: type) -> None:
    """Note that the hosted class has a ``@serve.multiplexed`` method, so the
    replica reports its models from the start, before the first is loaded."""
    global _declared
    for klass in inspect.getmro(cls):
        if any(getattr(v, MULTIPLEXED_ATTR, False) for v in vars(klass).values()):
            _declared = True
            return


def report() -> list[str]:
    """Every model id this process holds, loaded or loading (``/-/info``)."""
    ids: set[str] = set()
    for wrapper in list(_reporting):
        ids.update(wrapper._push_model_ids_info())
    return sorted(ids)


async def shutdown() -> None:
    """Unload every model of every wrapper (a replica's graceful stop)."""
    for wrapper in list(_reporting):
        await wrapper.shutdown()


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
        global _declared
        if not inspect.iscoroutinefunction(load):
            raise TypeError("@serve.multiplexed can only be used to decorate async functions")
        params = list(inspect.signature(load).parameters)
        is_method = bool(params) and params[0] == "self"
        if len(params) != (2 if is_method else 1):
            raise TypeError(
                "@serve.multiplexed can only be used to decorate functions or methods "
                "with exactly one 'model_id: str' argument."
            )
        _declared = True
        attr = f"__steady_models_{load.__name__}"
        shared: list[_ModelMultiplexWrapper] = []

        @functools.wraps(load)
        async def get(*args: Any) -> Any:
            owner = args[0] if is_method else None
            model_id = args[1] if is_method else (args[0] if args else "")
            if owner is None:
                if not shared:
                    shared.append(_ModelMultiplexWrapper(load, None, limit))
                models = shared[0]
            else:
                models = owner.__dict__.get(attr)
                if models is None:
                    models = owner.__dict__.setdefault(
                        attr, _ModelMultiplexWrapper(load, owner, limit)
                    )
            return await models.load_model(model_id)

        setattr(get, MULTIPLEXED_ATTR, True)
        return get

    if func is not None:
        return decorate(func)
    return decorate


def get_multiplexed_model_id() -> str:
    return context.get_multiplexed_model_id()
