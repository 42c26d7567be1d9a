"""An evicted model's ``__del__`` runs once (the eviction's), and the model keeps
its class: ``type(model) is Cls`` after eviction, as in Ray."""

from __future__ import annotations

import asyncio
import gc
from collections import OrderedDict
from typing import ClassVar

import pytest

from steadyserve.serve.multiplex import _ModelMultiplexWrapper, disarm


class Model:
    deleted: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def __del__(self) -> None:
        Model.deleted.append(self.name)


class AsyncModel:
    deleted: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self.name = name

    async def __del__(self) -> None:
        AsyncModel.deleted.append(self.name)


def test_an_evicted_model_keeps_its_class_and_is_deleted_once() -> None:
    Model.deleted.clear()
    kept, other = Model("kept"), Model("other")
    kept.__del__()
    disarm(kept)
    assert type(kept) is Model and isinstance(kept, Model)
    del kept
    gc.collect()
    assert Model.deleted == ["kept"]  # not again by the collector
    del other  # never evicted: the collector calls its __del__ as usual
    gc.collect()
    assert Model.deleted == ["kept", "other"]


# The collector's own call of an async __del__ makes a coroutine it never runs.
@pytest.mark.filterwarnings("ignore:coroutine 'AsyncModel.__del__' was never awaited")
def test_an_async_del_is_awaited_at_every_eviction() -> None:
    """An async ``__del__`` is awaited at each eviction, its class left alone (the
    collector runs none of an async one)."""
    AsyncModel.deleted.clear()
    models = {name: AsyncModel(name) for name in "abc"}

    # The LRU alone: a wrapper's constructor needs a replica's context.
    wrapper = _ModelMultiplexWrapper.__new__(_ModelMultiplexWrapper)
    wrapper.models = OrderedDict(models)

    async def evict_two() -> None:
        await wrapper.unload_model_lru()
        await wrapper.unload_model_lru()

    asyncio.run(evict_two())
    assert AsyncModel.deleted == ["a", "b"]
    assert all(type(m) is AsyncModel for m in models.values())
