"""The commands of a schedule's ``update`` events, as the CLI would send them: the
current version's spec changed as the event drew (sim/schedule.py ``UPDATES``) and
handed to the real :meth:`Controller.update_service` (or ``rollback``, or a fleet
deploy: sim/fleet.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from steadyserve.sim import fleet
from steadyserve.sim.answers import Nature

if TYPE_CHECKING:
    from steadyserve.sim.runner import Run


async def update(run: Run, args: dict[str, Any]) -> dict[str, Any]:
    """The ``update`` event ``args`` carried out by the run's controller; its answer."""
    controller, runtime = run.controller, run.runtime
    assert controller is not None and runtime is not None
    mode_name = str(args["mode"])
    if mode_name == "rollback":
        return await controller.rollback(run.name, None, dry_run=False)
    if mode_name == "fleet":
        return await fleet.deploy(run, args)
    current = controller.store.version(run.name, runtime.row.version)
    assert current is not None
    spec = json.loads(current.spec_json)
    service = spec["service"]
    mode: str | None = None
    if mode_name in ("rolling", "blue_green", "canary"):
        # A new version answers as the stable one (its noise field included),
        # but for what a canary drew (sim/canary_draw.py).
        nature = {"tag": run.commands, "differ": 0, "errors": 0, **(args.get("version") or {})}
        spec["run"] = replace(Nature.of(str(spec["run"])), **nature).run()
        mode = mode_name
    if mode_name == "blue_green":
        service["blue_green"]["auto_promote"] = bool(args["auto_promote"])
    elif mode_name == "canary":
        service["canary"]["steps"] = [*args["steps"], {"weight": 100}]
        for section in ("analysis", "shadow"):
            if section in args:
                service["canary"][section] = args[section]
    elif mode_name == "in_place":
        service["user_config"] = {"v": run.commands}
        if args.get("refused"):
            run.config_post.refused = service["user_config"]
            run.disturbed_until = float("inf")  # the version fails; so may replicas
    elif mode_name == "replicas":
        if service.get("replica_policy") is not None:
            service["replica_policy"]["max_replicas"] = max(1, int(args["replicas"]))
            service["replica_policy"]["min_replicas"] = 1
        else:
            service["replicas"] = int(args["replicas"])
    return await controller.update_service(run.name, json.dumps(spec), "", mode=mode, dry_run=False)
