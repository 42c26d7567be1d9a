"""``@serve.batch``: concurrent calls of a method gathered into one call with lists.

Ray Serve's semantics: each caller passes one item (per argument) and gets one
result; the decorated ``async def`` receives a list per argument and returns
(or, as an async generator, yields) a list as long as the batch. A batch runs
when it holds ``max_batch_size`` items or ``batch_wait_timeout_s`` after its
first item arrived, one batch at a time per instance (``max_concurrent_batches``
at a time with that option). An exception in the batch is raised by every
caller in it. It all happens on the replica's event loop, so it needs no thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from steadyserve.serve.exceptions import RayServeException

_END = object()
# Marks a plain function that must be called on the replica's event loop (it
# returns an async generator bound to that loop), as an ``async def`` would be.
ON_LOOP_ATTR = "_steady_runs_on_loop"


@dataclass
class _Request:
    args: list[Any]
    future: asyncio.Future[Any] | None = None  # a plain call
    items: asyncio.Queue[Any] | None = None  # a generator call: its items, then _END
    done: bool = False


@dataclass
class _Queue:
    """One instance's (or one function's) waiting calls and the task batching them."""

    func: Callable[..., Any]
    owner: Any  # the instance, or None for a function
    max_batch_size: int
    timeout_s: float
    concurrent: int
    pending: asyncio.Queue[_Request] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None

    def put(self, request: _Request) -> None:
        self.pending.put_nowait(request)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        running: set[asyncio.Task[None]] = set()
        while True:
            first = await self.pending.get()
            batch = [first]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout_s
            while len(batch) < self.max_batch_size:
                left = deadline - loop.time()
                if left <= 0:
                    # Past the wait (or none: timeout 0), take what is already queued:
                    # wait_for(get(), 0) would time out even with an item waiting.
                    if self.pending.empty():
                        break
                    batch.append(self.pending.get_nowait())
                    continue
                try:
                    batch.append(await asyncio.wait_for(self.pending.get(), max(left, 0)))
                except asyncio.TimeoutError:
                    break
            task = loop.create_task(self._run(batch))
            running.add(task)
            task.add_done_callback(running.discard)
            if len(running) >= self.concurrent:
                await asyncio.wait(set(running), return_when=asyncio.FIRST_COMPLETED)

    async def _run(self, batch: list[_Request]) -> None:
        columns = [list(col) for col in zip(*(r.args for r in batch), strict=True)]
        call_args = ([self.owner] if self.owner is not None else []) + columns
        if inspect.isasyncgenfunction(self.func):
            await self._stream(batch, call_args)
            return
        try:
            results = await self.func(*call_args)
            _check(results, len(batch))
        except Exception as exc:
            for r in batch:
                _settle(r, exc)
            return
        for r, value in zip(batch, results, strict=True):
            if r.future is not None and not r.future.done():
                r.future.set_result(value)

    async def _stream(self, batch: list[_Request], call_args: list[Any]) -> None:
        gen = self.func(*call_args)
        try:
            async for results in gen:
                _check(results, len(batch))
                for r, value in zip(batch, results, strict=True):
                    if r.done or r.items is None:
                        continue
                    if value is StopIteration or isinstance(value, StopIteration):
                        r.done = True
                        r.items.put_nowait(_END)
                    else:
                        r.items.put_nowait(value)
        except Exception as exc:
            for r in batch:
                if not r.done and r.items is not None:
                    r.items.put_nowait(exc)
        finally:
            await gen.aclose()
            for r in batch:
                if not r.done and r.items is not None:
                    r.done = True
                    r.items.put_nowait(_END)


async def _drain(items: asyncio.Queue[Any]) -> AsyncGenerator[Any, None]:
    """One caller's items of a streaming batch. At module level, so a class shipped
    by value (``serve.run`` pickles the decorated method's closures with it) still
    compares with this module's one ``_END``, not a copy pickled along."""
    while True:
        item = await items.get()
        if item is _END:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _check(results: Any, size: int) -> None:
    if not isinstance(results, (list, tuple)) or len(results) != size:
        got = len(results) if isinstance(results, (list, tuple)) else type(results).__name__
        raise RayServeException(
            f"Batched function doesn't preserve batch size: {size} inputs, {got} outputs "
            "(return or yield a list with one result per input)"
        )


def _settle(request: _Request, exc: BaseException) -> None:
    if request.future is not None and not request.future.done():
        request.future.set_exception(exc)


def _check_options(max_batch_size: Any, batch_wait_timeout_s: Any, concurrent: Any) -> int:
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, (int, float)):
        raise TypeError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if max_batch_size != int(max_batch_size):
        raise TypeError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if isinstance(batch_wait_timeout_s, bool) or not isinstance(batch_wait_timeout_s, (int, float)):
        raise TypeError(f"batch_wait_timeout_s must be a number >= 0, got {batch_wait_timeout_s!r}")
    if batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be >= 0, got {batch_wait_timeout_s!r}")
    if isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 1:
        raise ValueError(f"max_concurrent_batches must be an integer >= 1, got {concurrent!r}")
    return int(max_batch_size)


def batch(
    _func: Callable[..., Any] | None = None,
    /,
    max_batch_size: int = 10,
    batch_wait_timeout_s: float = 0.01,
    max_concurrent_batches: int = 1,
) -> Any:
    """``@serve.batch`` or ``@serve.batch(max_batch_size=, batch_wait_timeout_s=)``."""
    size = _check_options(max_batch_size, batch_wait_timeout_s, max_concurrent_batches)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if not (inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func)):
            raise TypeError(
                f"@serve.batch decorates an `async def` function or method, not {func!r}"
            )
        signature = inspect.signature(func)
        params = list(signature.parameters)
        is_method = bool(params) and params[0] == "self"
        attr = f"__steady_batch_{func.__name__}"
        shared: dict[int, _Queue] = {}

        def queue_for(owner: Any) -> _Queue:
            loop_id = id(asyncio.get_running_loop())
            queues = shared if owner is None else getattr(owner, attr, {})
            found = queues.get(loop_id)
            if found is None:
                found = _Queue(
                    func, owner, size, float(batch_wait_timeout_s), max_concurrent_batches
                )
                if owner is None:
                    shared[loop_id] = found
                else:
                    owner.__dict__.setdefault(attr, {})[loop_id] = found
            return found

        def request(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
            owner = args[0] if is_method else None
            bound = signature.bind(*args, **kwargs)
            values = list(bound.arguments.values())
            return owner, values[1:] if is_method else values

        if inspect.isasyncgenfunction(func):

            @functools.wraps(func)
            def stream(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
                # Queued at the call, not at the first ``anext``, as in Ray: callers
                # that make every generator before reading any still share a batch.
                owner, values = request(args, kwargs)
                items: asyncio.Queue[Any] = asyncio.Queue()
                queue_for(owner).put(_Request(values, items=items))
                return _drain(items)

            setattr(stream, ON_LOOP_ATTR, True)
            return stream

        @functools.wraps(func)
        async def call(*args: Any, **kwargs: Any) -> Any:
            owner, values = request(args, kwargs)
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            queue_for(owner).put(_Request(values, future=future))
            return await future

        return call

    if _func is not None:
        return decorate(_func)
    return decorate
