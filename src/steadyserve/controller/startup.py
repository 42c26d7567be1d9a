"""What a starting controller does with its home before it serves its API.

It takes over every service the state lists (a runtime each, their replicas and
load balancers re-adopted), then sweeps the home's processes (stops those the
state proves orphans, reports the strays: controller/orphans.py), takes a
backup and keeps taking them (controller/backups.py), and finishes the downs a
previous controller began. Apart from daemon.py so that the simulator
(sim/world.py) runs this same start on its simulated machine: everything here
reaches the machine through the controller's backend and its process port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from steadyserve.controller import backups
from steadyserve.controller.orphans import Known, kept_namespaces, reap_orphans
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.states import Desired, EventKind

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller

log = logging.getLogger("steadyserve.controller")


def take_over(
    controller: Controller, run: Callable[[ServiceRuntime], None]
) -> tuple[Known, set[int]]:
    """A runtime for every service the state lists, handed to ``run`` (start its
    reconcile loop; the simulator only re-adopts and ticks it itself). Returns what
    the state recorded and the pids its runtimes hold: the orphan sweep's evidence."""
    store = controller.store
    # What this state recorded, read before any replica of this run is launched:
    # only what it proves its own is stopped as an orphan (controller/orphans.py).
    known = Known(store.known_replicas(), store.known_services())
    for row in store.services():
        if not controller.endpoints.hold(row.port):
            log.warning(
                "service %s: endpoint port %d is claimed by another process", row.name, row.port
            )
        run(controller._new_runtime(row))
    claimed = set().union(*(r.adopted_pids() for r in controller.services.values()))
    return known, claimed


async def sweep(controller: Controller, known: Known, claimed: set[int]) -> asyncio.Task[None]:
    """The rest of a start: the orphan sweep, the backups (the returned task keeps
    taking them), the downs a previous controller did not finish."""
    store, home = controller.store, controller.home
    for stray in reap_orphans(str(home.root), claimed, known, controller.machine):
        if stray.service in controller.services:  # no replica id: it must stay unknown
            store.add_event(stray.service, None, None, EventKind.STRAY_PROCESS, stray.report())
    keep = kept_namespaces(home.root, controller._claimed_namespaces(), known)
    await asyncio.to_thread(controller.backend.reap_isolation, keep)
    await asyncio.to_thread(backups.take, store, home)
    backup_task = asyncio.create_task(backups.keep(store, home, controller.clock))
    for row in store.services():
        if row.desired is Desired.DOWN:  # a down the previous controller did not finish
            controller._resumed_downs.append(
                asyncio.create_task(controller.delete_service(row.name, bool(row.purge)))
            )
    return backup_task
