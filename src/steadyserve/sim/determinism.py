"""What makes one seed give one run: no thread, no unseeded random generator.

- :class:`InlineExecutor` becomes the event loop's default executor, so every
  ``asyncio.to_thread`` of the controller (snapshots, pruning, hashing) runs on the
  loop's thread at the point it is awaited, not on a thread the OS schedules.
- :func:`seeded_generators` makes the ``random.Random()`` that routing policies and
  the weighted-version chooser create for themselves draw their seeds from the run's
  seed, in the order they are made.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from steadyserve.core.canary import weighted
from steadyserve.core.routing import policies

T = TypeVar("T")


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each submitted call at once, on the caller's thread (a ThreadPoolExecutor
    by type only, as asyncio insists on one; it never starts a thread)."""

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting task, as a thread would
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


class _SeededRandom:
    """Stands in for the ``random`` module in the modules that make generators."""

    def __init__(self, seeds: random.Random) -> None:
        self._seeds = seeds

    def Random(self, seed: Any = None) -> random.Random:
        return random.Random(self._seeds.getrandbits(64) if seed is None else seed)


@contextlib.contextmanager
def seeded_generators(seed: int) -> Iterator[None]:
    """Within: every generator made without a seed by the routing code is seeded
    from ``seed`` (in creation order)."""
    stand_in = _SeededRandom(random.Random(seed))
    modules = (policies, weighted)
    saved = [module.__dict__["random"] for module in modules]
    for module in modules:
        setattr(module, "random", stand_in)  # noqa: B010 (the module's own import)
    try:
        yield
    finally:
        for module, original in zip(modules, saved, strict=True):
            setattr(module, "random", original)  # noqa: B010
