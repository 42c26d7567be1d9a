"""Scale to zero, the load balancer's half: hold requests while no replica serves.

A service that may scale to zero (``min_replicas: 0``) gets ``hold_at_zero_s``
above 0 in its route table. A request that arrives while the table lists no
replica then waits in the proxy's queue (within ``max_queued_requests``)
instead of getting an immediate 503, and the load balancer asks the controller
for a replica at once (``POST /api/v1/lb/NAME/wake``, repeated every second
while requests wait and none serves, in case the controller was restarting).
The first table that lists a ready replica starts the held requests, first come
first served. A request held for ``hold_at_zero_s`` without a replica is
answered 503 with a body that says why.

The listening socket stays open throughout: at zero the load balancer process
is the service's only process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from steadyserve.home.paths import Home
from steadyserve.lb import control_http
from steadyserve.lb.exchange import WAITING
from steadyserve.wire.routes import service_url

if TYPE_CHECKING:
    from steadyserve.lb.exchange import Exchange
    from steadyserve.lb.proxy import Proxy

log = logging.getLogger("steadyserve.lb")

ASK_AGAIN_S = 1.0
"""While requests are held and no replica serves, the controller is asked this often."""


class ZeroHold:
    """Held requests' deadlines, the expiry timer, and the calls for a replica."""

    def __init__(self, proxy: Proxy, ask: Callable[[], Awaitable[bool]]) -> None:
        self.proxy = proxy
        self._ask_controller = ask
        self.ask_controller = ask  # a WebSocket handshake at zero asks too
        self._held: deque[tuple[float, Exchange]] = deque()
        self._ids: set[int] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._asking: asyncio.Task[None] | None = None
        self.asks = 0

    @property
    def hold_s(self) -> float:
        table = self.proxy.balancer.table
        return table.hold_at_zero_s if table is not None else 0.0

    def active(self) -> bool:
        """Holding applies: the service may scale to zero and no replica is listed."""
        return self.hold_s > 0 and not self.proxy.balancer.replicas

    def hold(self, ex: Exchange) -> bool:
        """Take a new request that found no replica; False if holding does not apply."""
        if not self.active():
            return False
        proxy = self.proxy
        limit = proxy.balancer.max_queued
        if 0 <= limit <= len(proxy.waiting):
            msg = f"service {proxy.service!r} is starting from zero, queue full"
            proxy._respond(ex, 503, msg, "queue_full")
            return True
        proxy.enqueue(ex)
        self._register(ex)
        self._ask()
        return True

    def keep(self) -> bool:
        """The queue's head has nowhere to go: keep the whole queue if at zero (the
        last replica went while requests waited for a slot)."""
        if not self.active():
            return False
        for ex in self.proxy.waiting:
            self._register(ex)
        self._ask()
        return True

    def on_table(self) -> None:
        """A new table: once it lists a replica, held requests are ordinary queued ones."""
        if self.proxy.balancer.replicas and self._held:
            self._held.clear()
            self._ids.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _register(self, ex: Exchange) -> None:
        if id(ex) in self._ids:
            return
        self._ids.add(id(ex))
        self._held.append((self.proxy.now() + self.hold_s, ex))
        if self._timer is None:
            self._arm()

    def _arm(self) -> None:
        if self._held:
            delay = max(0.0, self._held[0][0] - self.proxy.now())
            self._timer = self.proxy.loop.call_later(delay, self._expire)
        else:
            self._timer = None

    def _expire(self) -> None:
        proxy = self.proxy
        now = proxy.now()
        while self._held and self._held[0][0] <= now:
            _, ex = self._held.popleft()
            self._ids.discard(id(ex))
            if ex.state is not WAITING:
                continue  # answered, or the client left
            with contextlib.suppress(ValueError):
                proxy.waiting.remove(ex)
            proxy._respond(
                ex,
                503,
                f"service {proxy.service!r} has no ready replica: it was scaled to zero and"
                f" none became ready within cold_start_timeout_s={self.hold_s:g}",
                "cold_start_timeout",
            )
        self._arm()

    def _waiting(self) -> bool:
        return any(ex.state is WAITING for _, ex in self._held)

    def _ask(self) -> None:
        if self._asking is None or self._asking.done():
            self._asking = self.proxy.loop.create_task(self._keep_asking())

    async def _keep_asking(self) -> None:
        while self._waiting() and self.active():
            self.asks += 1
            if not await self._ask_controller():
                log.debug("asking the controller for a replica failed; retrying")
            await asyncio.sleep(ASK_AGAIN_S)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._asking is not None:
            self._asking.cancel()


def controller_asker(home: Home, service: str) -> Callable[[], Awaitable[bool]]:
    """``POST {controller}/api/v1/lb/{service}/wake``; True when it answered 2xx."""

    async def ask() -> bool:
        url = home.controller_url()
        if url is None:
            return False
        try:
            status, _ = await control_http.request(
                service_url(url, service, "wake"), method="POST", body=b"{}", timeout=2.0, home=home
            )
        except control_http.ControlHTTPError:
            return False
        return 200 <= status < 300

    return ask
