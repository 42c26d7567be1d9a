"""Call a user's class the way each method is written: async ones on the event
loop, sync ones off it, so a slow ``__init__``, ``reconfigure`` or ``__call__``
never stalls the control endpoints or other requests.

``__init__``, ``reconfigure`` and ``check_health`` run in daemon threads of their
own: they are rare, must not wait behind busy request threads, and must not keep
a stopping process alive. Sync ``__call__`` runs in the request thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from starlette.requests import Request

from steadyserve.replica.loader import has_method
from steadyserve.serve.batching import ON_LOOP_ATTR
from steadyserve.serve.multiplex import disarm

T = TypeVar("T")


def in_daemon_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Run ``fn(*args)`` in a new daemon thread; the future resolves on this loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting coroutine, whatever it is
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    name = getattr(fn, "__qualname__", "user-code")
    threading.Thread(target=run, name=f"replica:{name}", daemon=True).start()
    return future


def runs_on_loop(fn: object) -> bool:
    """``async def`` methods (and async generators) are called on the event loop."""
    return (
        inspect.iscoroutinefunction(fn)
        or inspect.isasyncgenfunction(fn)
        or bool(getattr(fn, ON_LOOP_ATTR, False))
    )


HTTP_ARGS_ATTR = "__steady_http_request__"


def takes_positional(func: Any, method: bool) -> bool:
    """Whether HTTP requests give ``func`` the request: as in Ray, a ``__call__`` (or
    function) with no positional parameter is called with none."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return True
    if method and params:
        params = params[1:]  # self
    positional = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    return any(p.kind in positional for p in params)


class UserClass:
    """One replica's instance of the user's class, with each method called right."""

    def __init__(
        self,
        cls: type,
        executor: Executor,
        init_args: tuple[Any, ...] = (),
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.cls = cls
        self.init_args = init_args
        self.init_kwargs = init_kwargs or {}
        self.name = cls.__qualname__
        self.executor = executor
        self.instance: Any = None
        self.has_reconfigure = has_method(cls, "reconfigure")
        self.has_check_health = has_method(cls, "check_health")
        self.has_call = has_method(cls, "__call__")  # False: reached through handles only
        self._call_on_loop = runs_on_loop(cls.__call__)
        explicit = cls.__dict__.get(HTTP_ARGS_ATTR)
        self._call_args = explicit if explicit is not None else takes_positional(cls.__call__, True)
        self._reconfigure_lock = asyncio.Lock()
        self._health: asyncio.Future[Any] | None = None

    async def construct(self) -> None:
        """``__init__`` off the loop: a model load must not block the control server."""
        if inspect.iscoroutinefunction(getattr(self.cls, "__init__", None)):
            # Ray's ``async def __init__``: made, then its constructor awaited on the loop.
            cls: Any = self.cls
            instance = cls.__new__(cls)
            await instance.__init__(*self.init_args, **self.init_kwargs)
            self.instance = instance
            return
        self.instance = await in_daemon_thread(
            functools.partial(self.cls, *self.init_args, **self.init_kwargs)
        )

    async def reconfigure(self, user_config: Any) -> None:
        """One at a time: two quick updates must land in the order they were sent."""
        async with self._reconfigure_lock:
            await self._run(self.instance.reconfigure, user_config)

    async def check_health(self, timeout_s: float) -> None:
        """Raise what ``check_health`` raised, or ``TimeoutError`` past ``timeout_s``.

        A check still running from an earlier probe is awaited again rather than
        started twice, so a hung check costs one thread, not one per probe."""
        if self._health is None or self._health.done():
            self._health = asyncio.ensure_future(self._run(self.instance.check_health))
            self._health.add_done_callback(_retrieve)
        await asyncio.wait_for(asyncio.shield(self._health), timeout_s)

    async def call(self, request: Request) -> Any:
        """``__call__``; may return an awaitable (awaited) or a generator (left as is)."""
        args = (request,) if self._call_args else ()
        if self._call_on_loop:
            result = self.instance(*args)
        else:
            # Read the body first so the sync method never needs the event loop
            # for it: request.body()/json() then return from Starlette's cache.
            await request.body()
            loop = asyncio.get_running_loop()
            # The request's context (its multiplexed model id) goes with it.
            run = contextvars.copy_context().run
            result = await loop.run_in_executor(self.executor, run, self.instance, *args)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def delete(self) -> None:
        """``__del__`` now, as Ray's replica does on a graceful stop: the instance
        gives back what it holds (a GPU, a connection) while the process still can,
        where the garbage collector at exit might never call it."""
        instance = self.instance
        if instance is None or getattr(type(instance), "__del__", None) is None:
            return
        try:
            await self._run(instance.__del__)
        finally:
            disarm(instance)  # called once: not again when the process exits

    async def _run(self, method: Callable[..., Any], *args: Any) -> Any:
        if runs_on_loop(method):
            return await method(*args)
        result = await in_daemon_thread(method, *args)
        if inspect.isawaitable(result):
            result = await result
        return result


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark an abandoned check's outcome as seen (no 'never retrieved' warnings)."""
    if not future.cancelled():
        future.exception()
