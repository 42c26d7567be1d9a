"""One service's load as the controller sees it: a time-stamped window of reports.

Two sources feed it. The load balancer POSTs, twice a second, per replica the
cumulative count of requests it started and the count in flight, plus the
requests waiting in its queue; this module turns the cumulative counts into
"started since the previous report". Python replicas also count their own
ongoing requests (the runner's ``/-/info``); the controller reads that about
once a second and, where a fresh one exists, it replaces the balancer's
in-flight count for that replica, as Ray Serve prefers the replica's number.
The same read carries a multiplexed replica's model ids (``on_info``).

Nothing here reads a clock: every call takes ``now``, so tests drive it with
simulated time. The window is the pure :class:`LoadWindow`, sized to the
policy's look-back.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from steadyserve.controller.netns_http import request_in
from steadyserve.core.autoscale import LoadSample, LoadWindow, ReplicaLoad
from steadyserve.wire.netns import path_of as netns_path

log = logging.getLogger("steadyserve.controller")

OWN_COUNT_FRESH_S = 3.0
"""A replica's own ongoing count older than this is not used (the replica may hang)."""

OWN_COUNT_PERIOD_S = 1.0
"""How often the controller reads each Python replica's own ongoing count."""

CONTROL_INFO = "/-/info"


class ServiceLoad:
    """The recent load reports of one service, as :class:`LoadSample` values."""

    def __init__(self, span: float) -> None:
        self.window = LoadWindow(span=span)
        self.latest: LoadSample | None = None
        self._lb_pid: int | None = None
        self._requests: dict[str, dict[int, int]] = {}  # per view, as last reported
        self._own: dict[int, tuple[float, float]] = {}

    def resize(self, span: float) -> None:
        self.window.resize(span)

    def lb_report(
        self,
        now: float,
        inflight: Mapping[int, int],
        requests: Mapping[int, int],
        queued: int = 0,
        lb_pid: int | None = None,
        views: Mapping[str, Mapping[int, int]] | None = None,
    ) -> LoadSample:
        """Add one load balancer report; ``requests`` are cumulative per replica.

        The first report of a load balancer process (a new ``lb_pid``: the LB or
        the controller restarted) only sets the baseline, so counts accumulated
        before it are not mistaken for a burst. A replica that first appears in a
        known LB's report started its requests since that LB's previous report.

        ``views``: the cumulative counts of each process that ``requests`` adds
        up (the LB's workers, the gateway), by view. The differences are then
        taken view by view, so one that restarts (its counts start again from
        zero) or goes away (the gateway stops serving the service) is not taken
        for a burst of everything the others ever counted. A view's first report
        is a baseline too: the gateway outlives controller restarts, so what it
        counted before is not new.
        """
        first_of_lb = lb_pid is None or lb_pid != self._lb_pid
        self._lb_pid = lb_pid
        views = views if views is not None else {"": requests}
        started: dict[int, int] = {}
        if not first_of_lb:
            for key, counts in views.items():
                before = self._requests.get(key)
                if before is None:
                    continue
                for rid, total in counts.items():
                    old = before.get(rid)
                    n = total if old is None or total < old else total - old
                    started[rid] = started.get(rid, 0) + n
        loads = []
        for rid in sorted(set(inflight) | set(requests)):
            own = self._own.get(rid)
            ongoing = own[1] if own is not None and now - own[0] <= OWN_COUNT_FRESH_S else None
            loads.append(ReplicaLoad(rid, started.get(rid, 0), inflight.get(rid, 0), ongoing))
        self._requests = {key: dict(counts) for key, counts in views.items()}
        sample = LoadSample(now, tuple(loads), max(0, queued))
        self.window.add(sample)
        self.latest = sample
        return sample

    def own_count(self, replica_id: int, now: float, ongoing: float) -> None:
        """A Python replica's own ongoing count, read at ``now``."""
        self._own[replica_id] = (now, ongoing)

    def forget(self, keep: set[int]) -> None:
        """Drop the own counts of replicas no longer listed."""
        for rid in list(self._own):
            if rid not in keep:
                del self._own[rid]


@dataclass(frozen=True)
class CountTarget:
    """A Python replica whose own ongoing count is read: its id and control port."""

    replica_id: int
    host: str
    control_port: int
    headers: Mapping[str, str] = field(default_factory=dict)
    netns: str | None = None
    """The replica's network namespace's name (``service.isolation``): its port is in there."""


async def read_info(
    session: aiohttp.ClientSession, target: CountTarget, timeout: float = 1.0
) -> dict[str, Any] | None:
    """The runner's ``/-/info`` as JSON, or None if it did not answer one."""
    try:
        if target.netns is not None:
            status, raw = await asyncio.wait_for(
                request_in(
                    netns_path(target.netns),
                    target.host,
                    target.control_port,
                    "GET",
                    CONTROL_INFO,
                    dict(target.headers),
                ),
                timeout,
            )
            data = json.loads(raw) if status == 200 else None
        else:
            url = f"http://{target.host}:{target.control_port}{CONTROL_INFO}"
            limit = aiohttp.ClientTimeout(total=timeout)
            async with session.get(url, headers=dict(target.headers), timeout=limit) as response:
                data = await response.json() if response.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def ongoing_of(info: Mapping[str, Any] | None) -> float | None:
    value = info.get("ongoing_requests") if info is not None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


InfoSink = Callable[[int, Mapping[str, Any]], None]
"""Told each replica's ``/-/info`` answer (replica id, the JSON): the models a
multiplexed replica holds are in it (controller/multiplexed.py)."""


async def poll_own_counts(
    session: aiohttp.ClientSession,
    targets: Callable[[], list[CountTarget]],
    load: Callable[[], ServiceLoad],
    clock: Callable[[], float],
    period: float = OWN_COUNT_PERIOD_S,
    on_info: InfoSink | None = None,
) -> None:
    """Forever: read every listed Python replica's ``/-/info`` once per ``period``:
    its own count for the load, the rest for ``on_info``."""
    while True:
        listed = targets()
        if listed:
            infos = await asyncio.gather(*(read_info(session, t) for t in listed))
            now = clock()
            for target, info in zip(listed, infos, strict=True):
                count = ongoing_of(info)
                if count is not None:
                    load().own_count(target.replica_id, now, count)
                if info is not None and on_info is not None:
                    on_info(target.replica_id, info)
        load().forget({t.replica_id for t in listed})
        await asyncio.sleep(period)
