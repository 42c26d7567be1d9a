"""A canary's shadow step in the load balancer: mirror a share of the requests to the
new version and compare its answers with the ones the clients got.

The proxy asks :meth:`Mirroring.offer` once a replica of the stable version has
answered a request, before the client connection moves on (the whole answer was
already handed to the client's socket; nothing here runs before the loop's next
turn, so the client's answer is never delayed or changed). What is mirrored:

* requests of the methods the table lists (GET, HEAD and OPTIONS unless the
  service file says more), with a body of at most ``max_body_bytes`` that the load
  balancer still holds, never a WebSocket handshake, never a request pinned with
  ``X-Steady-Version``, never a request the new version answered itself;
* exactly ``percent`` of them and never more (a running credit: 50% is every
  second one); one of that share that cannot be mirrored is *dropped* and
  counted: when no replica of the new version is READY or has a free slot
  (``max_ongoing_requests``), when ``MAX_MIRRORS`` copies are in flight in this
  worker already, or when the stable answer is longer than the load balancer keeps
  (64 KiB) or not readable.

A copy goes on a connection of its own with ``X-Steady-Shadow: 1`` added (so a
replica can leave side effects out), and holds one of the new replica's slots
while in flight. A ``noise_share`` of the copies also goes to the stable version
a second time (another replica when there is one, and only with room to spare:
its slots are the clients'), and the two stable answers' differences are the
noise (core/shadow/verdict.py). The counts are per new version, cumulative, in
the worker's load report, which the controller adds up over every worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from steadyserve.core.shadow.compare import NO_ANSWER, Answer, Rules, differences, keys_in
from steadyserve.core.shadow.mask import masked
from steadyserve.core.shadow.verdict import MAX_NOISE_KEYS, MAX_SIGNATURES, OTHER, Tally
from steadyserve.lb.mirror_http import fetch, parse_seen
from steadyserve.wire.mirror import Mirror

if TYPE_CHECKING:
    from steadyserve.lb.balancer import ReplicaState
    from steadyserve.lb.exchange import Exchange
    from steadyserve.lb.proxy import Proxy
    from steadyserve.lb.upstream import UpstreamConnection

log = logging.getLogger("steadyserve.lb")

MAX_MIRRORS = 64  # copies in flight per worker; past that, the share is dropped
SHADOW_HEADER = b"x-steady-shadow: 1\r\n"
DEFAULT_TIMEOUT = 30.0


class ShadowCounts:
    """One new version's cumulative shadow counts in this worker (the JSON of
    core/shadow/verdict.py's ``Tally``)."""

    __slots__ = (
        "compared",
        "dropped",
        "examples",
        "mirrored",
        "noise",
        "noise_pairs",
        "signatures",
    )

    def __init__(self) -> None:
        self.mirrored = 0
        self.dropped = 0
        self.compared = 0
        self.signatures: dict[str, int] = {}
        self.noise_pairs = 0
        self.noise: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def compared_one(self, keys: frozenset[str], example: str) -> None:
        self.compared += 1
        signature = keys_in(keys)
        signatures = self.signatures
        if signature not in signatures and len(signatures) >= MAX_SIGNATURES:
            signature = OTHER
        signatures[signature] = signatures.get(signature, 0) + 1
        examples = self.examples
        for key in keys:
            if key not in examples and len(examples) < MAX_NOISE_KEYS:
                examples[key] = example

    def noise_one(self, keys: frozenset[str]) -> None:
        self.noise_pairs += 1
        noise = self.noise
        for key in keys:
            if key in noise or len(noise) < MAX_NOISE_KEYS:
                noise[key] = noise.get(key, 0) + 1

    def to_json(self) -> dict[str, Any]:
        """The report's form of these counts: the controller's :class:`Tally`'s."""
        return Tally(
            self.mirrored,
            self.dropped,
            self.compared,
            self.signatures,
            self.noise_pairs,
            self.noise,
            self.examples,
        ).to_json()


class Mirroring:
    """The shadow step in force in one proxy (one table's ``mirror``)."""

    def __init__(self, proxy: Proxy, mirror: Mirror) -> None:
        self.proxy = proxy
        self.mirror = mirror
        self.version = mirror.version
        self.methods = frozenset(m.encode("ascii") for m in mirror.methods)
        self.rules = Rules(
            headers=mirror.headers, ignore=mirror.ignore, stream_tolerance=mirror.stream_tolerance
        )
        self.counts = proxy.metrics.shadow.setdefault(mirror.version, ShadowCounts())
        self.inflight = 0
        self._credit = 0  # percent points earned; 100 of them make one copy
        self._noise_credit = 0.0
        self._tasks: set[asyncio.Task[None]] = set()

    def offer(self, ex: Exchange, conn: UpstreamConnection) -> None:
        """A stable replica answered ``ex`` on ``conn``: mirror it if it is in the share."""
        served = ex.served
        if served is None or served.version == self.version or ex.pin is not None:
            return
        head = ex.head
        space = head.find(b" ")
        method = head[:space]
        if method not in self.methods or ex.client.upgrading is ex:
            return
        self._credit += self.mirror.percent
        if self._credit < 100:
            return
        self._credit -= 100
        counts = self.counts
        seen = conn.seen
        if (
            seen is None
            or not ex.request_done
            or ex.held_size < 0
            or ex.held_size > self.mirror.max_body_bytes
            or self.inflight >= MAX_MIRRORS
        ):
            counts.dropped += 1
            return
        balancer = self.proxy.balancer
        replica = balancer.choose(None, self.version)
        if replica is None:  # not READY, ejected, or every slot taken: clients first
            counts.dropped += 1
            return
        counts.mirrored += 1
        stable = self._noise_replica(served)
        end = head.rfind(b"\r\n\r\n")
        request = b"".join((head[: end + 2], SHADOW_HEADER, b"\r\n", *(ex.held or ())))
        line_end = head.find(b"\r\n")
        target = head[space + 1 : head.rfind(b" ", 0, line_end)].decode("latin-1")
        example = masked(method.decode("latin-1"), target)
        self.inflight += 1
        task = self.proxy.loop.create_task(
            self._compare(list(seen), method == b"HEAD", request, replica, stable, example)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _noise_replica(self, served: ReplicaState) -> ReplicaState | None:
        """A stable replica for a second stable answer, this time, or None."""
        share = self.mirror.noise_share
        if share <= 0:
            return None
        self._noise_credit += share
        if self._noise_credit < 1.0:
            return None
        self._noise_credit -= 1.0
        balancer = self.proxy.balancer
        replica = balancer.choose({served.id}, served.version) or balancer.choose(
            None, served.version
        )
        if replica is not None and replica.inflight > max(1, balancer.max_ongoing // 2):
            self.proxy.give_back(replica)  # the clients need the room
            return None
        return replica

    async def _compare(
        self,
        seen: list[bytes],
        head_only: bool,
        request: bytes,
        replica: ReplicaState,
        stable: ReplicaState | None,
        example: str,
    ) -> None:
        timeout = self.proxy.limits.request_timeout_s or DEFAULT_TIMEOUT
        proxy = self.proxy
        try:
            primary = parse_seen(seen, head_only)
            asked = [_ask(replica, request, head_only, timeout)]
            if stable is not None:
                asked.append(_ask(stable, request, head_only, timeout))
            answers = await asyncio.gather(*asked)
        except Exception:  # a bug here must never reach the data path
            log.exception("shadow comparison failed")
            return
        finally:
            self.inflight -= 1
            proxy.give_back(replica)
            if stable is not None:
                proxy.give_back(stable)
        counts = self.counts
        if primary is None:
            counts.dropped += 1
            return
        candidate = answers[0]
        if candidate is None:
            counts.compared_one(frozenset({NO_ANSWER}), example)
        else:
            counts.compared_one(differences(primary, candidate, self.rules), example)
        if stable is not None and answers[1] is not None:
            counts.noise_one(differences(primary, answers[1], self.rules))

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


async def _ask(
    replica: ReplicaState, request: bytes, head_only: bool, timeout: float
) -> Answer | None:
    return await fetch(replica.host, replica.port, replica.netns, request, head_only, timeout)


def mirroring_for(proxy: Proxy, mirror: Mirror | None, now: Mirroring | None) -> Mirroring | None:
    """The mirroring a new table asks for (the one in force when unchanged)."""
    if now is not None and mirror == now.mirror:
        return now
    if now is not None:
        now.close()
    return None if mirror is None else Mirroring(proxy, mirror)
