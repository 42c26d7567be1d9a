"""``steady deploy``: a fleet file (or a Ray Serve config) as the whole desired
state of the services it made.

Everything is checked before anything changes (bad input changes nothing), then
each listed service is created or updated, and the services this file made
earlier and no longer lists are taken down. Which services a file owns is the
pure rule of controller/ownership.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from steadyserve.controller.errors import BadInput, Conflict
from steadyserve.controller.gateway import prefix_conflict
from steadyserve.controller.ownership import fleet_owner, unlisted

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller


async def deploy(
    controller: Controller,
    items: list[tuple[str, str]],
    dry_run: bool,
    spec_file: str | None = None,
    *,
    prune_all: bool = False,
    expect_down: list[str] | None = None,
    gateway_port: int | None = None,
    gateway_timeout: float | None = None,
) -> dict[str, Any]:
    """The file is the whole desired state of the services it made: create,
    update, and take down the ones this file made earlier and no longer lists.

    Services made by ``steady up`` or by another fleet file are kept (listed
    with action ``keep``) unless ``prune_all``. ``expect_down`` is the list of
    removals the user confirmed; when the controller would now take down a
    different set (someone changed the services meanwhile), nothing changes.
    """
    specs = [(controller._parse(text), yaml_text) for text, yaml_text in items]
    names = [s.name for s, _ in specs]
    if None in names or len(set(names)) != len(names):
        raise BadInput("services: every service needs a unique name")
    owner = fleet_owner(spec_file)
    problem = controller.gateway.check_port(gateway_port)
    if problem is not None:
        if spec_file and not spec_file.startswith("serve.run:"):  # serve.run names its own
            problem += f"; the port is http_options.port of {spec_file} (Ray's 8000 if unset)"
        raise BadInput(f"gateway: {problem}")
    results: list[dict[str, Any]] = []
    # Check everything before changing anything: bad input changes nothing.
    for spec, _ in specs:
        assert spec.name is not None
        if spec.name not in controller.services:
            await controller._check_new(spec, spec_file)
        else:
            await controller.update_service(
                spec.name, spec.spec_json(), "", mode=None, dry_run=True, spec_file=spec_file
            )
    owners = {n: row.owner for n in controller.services if (row := controller.store.service(n))}
    removed, kept = unlisted(list(controller.services), owners, names, owner, prune_all)
    staying = [n for n in controller.services if n not in names and n not in removed]
    clash = prefix_conflict(
        {s.name: s.service.route_prefix for s, _ in specs if s.name is not None},
        {
            n: controller.services[n].spec.service.route_prefix
            for n in staying
            if n not in controller._down_tasks  # on its way down: its prefix is free
        },
    )
    if clash is not None:
        raise BadInput(clash)
    if not dry_run and expect_down is not None and sorted(expect_down) != sorted(removed):
        raise Conflict(
            "the services deploy would take down changed since it asked"
            f" (now: {', '.join(removed) or 'none'}); run it again"
        )
    for spec, yaml_text in specs:
        assert spec.name is not None
        if spec.name not in controller.services:
            if dry_run:
                results.append({"name": spec.name, "action": "create"})
            else:
                created = await controller.create_service(
                    spec.spec_json(), yaml_text, spec_file, owner
                )
                results.append({**created, "action": "create"})
        else:
            result = await controller.update_service(
                spec.name,
                spec.spec_json(),
                yaml_text,
                mode=None,
                dry_run=dry_run,
                spec_file=spec_file,
            )
            if not dry_run and owner:  # the file now owns what it lists
                controller.store.set_service_fields(spec.name, owner=owner)
            results.append({**result, "action": "update" if result["changed"] else "none"})
    for name in removed:
        if not dry_run:
            await controller.delete_service(name, purge=False)
        results.append({"name": name, "action": "down"})
    for name, reason in kept:
        results.append({"name": name, "action": "keep", "reason": reason})
    if not dry_run:
        await controller.gateway.configure(gateway_port, gateway_timeout)
    return {"dry_run": dry_run, "services": results, "gateway": {"port": gateway_port}}
