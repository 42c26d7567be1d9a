"""A fleet deploy in the simulator: ``steady deploy`` of a file listing the run's
service and, drawn or not, a second one (``web``) on the same controller.

The deploy is the real :meth:`Controller.deploy` (controller/fleet.py): every
listed service is checked first, then created or updated (the classifier picks
the mode), and one the file made earlier and no longer lists is taken down. So a
run may hold two services: one controller reconciles both, their replicas share
the machine's capacity, its orphan sweep and its recovery. ``web`` has a load
balancer (the drain handshake needs one) whose reports go to the controller's entry
for reports under ``web``'s name, and no clients: its invariants are those that need
no traffic (``moves``, ``agreement``, ``ends``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from steadyserve.sim.answers import Nature
from steadyserve.sim.traffic import SimLoadBalancer

if TYPE_CHECKING:
    from steadyserve.sim.runner import Run

WEB = "web"
FILE = "fleet.yaml"


def web_service(service: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The second service's ``service:`` section: the run's probes and timings, a fixed
    count, no canary (nothing drives its steps)."""
    web = copy.deepcopy(service)
    web.pop("replica_policy", None)
    web.pop("canary", None)
    web["replicas"] = replicas
    return web


async def deploy(run: Run, args: dict[str, Any]) -> dict[str, Any]:
    """``steady deploy fleet.yaml``: the run's service (its command changed when drawn)
    and ``web`` when listed; its answer as the trace shows it."""
    controller, runtime = run.controller, run.runtime
    assert controller is not None and runtime is not None
    current = controller.store.version(runtime.name, runtime.row.version)
    assert current is not None
    spec = json.loads(current.spec_json)
    if args["change"]:
        # A new version answers as the stable one does (its noise field included),
        # as the runner's other commands make one (sim/answers.py).
        nature = replace(Nature.of(str(spec["run"])), tag=run.commands, differ=0, errors=0)
        spec["run"] = nature.run()
        run.web_run = f"serve --web{run.commands}"
    items = [(json.dumps({**spec, "name": runtime.name}), "")]
    if args["web"]:
        web = {
            "name": WEB,
            "run": run.web_run,
            "service": web_service(run.schedule.service, int(args["replicas"])),
        }
        items.append((json.dumps(web), ""))
    answer = await controller.deploy(items, dry_run=False, spec_file=FILE)
    done = ",".join(f"{s['name']}:{s['action']}" for s in answer["services"])
    return {"version": done}


def follow(run: Run) -> None:
    """A load balancer for every service the controller runs, following its table;
    a service taken down leaves its balancer with nothing to follow."""
    controller = run.controller
    services = controller.services if controller is not None else {}
    for name, runtime in services.items():
        lb = run.lbs.get(name)
        if lb is None:
            lb = run.lbs[name] = SimLoadBalancer(run.clock, run._sim_task)
        if lb.runtime is not runtime:
            assert controller is not None
            # Its reports go to the controller's entry for reports under its own
            # service's name (controller/lb_report.py): ``web``'s feed ``web``'s counts.
            lb.attach(runtime, controller.observer)
    for name, lb in run.lbs.items():
        if name not in services and lb.runtime is not None:
            lb.detach()
