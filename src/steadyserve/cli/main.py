"""The ``steady`` command: up, status, logs, down, controller.

Bad input (a wrong field, a missing file, an unknown service, a port in use)
prints one line naming what is wrong and exits 2, having changed nothing;
other failures exit 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from steadyserve.backends import backend_name, netns
from steadyserve.cli import json_errors, progressive
from steadyserve.cli.common import (
    _confirm,
    _echo_json,
    _home,
    _print_created,
    _print_notes,
    _print_plan,
    _wait_ready,
    after_plan,
    console,
    env_option,
    ignore_image_option,
    ignore_resources_option,
    json_option,
    reports_errors,
    secret_option,
    wait_update,
    yes_option,
)
from steadyserve.cli.controller_commands import controller
from steadyserve.cli.dashboard import dashboard
from steadyserve.cli.jobs import jobs
from steadyserve.cli.ray_cli import ray_group
from steadyserve.cli.records import history, logs
from steadyserve.cli.serve import plan_line, serve_group, up_plan
from steadyserve.cli.status import status
from steadyserve.client.connection import (
    Client,
    CommandError,
)
from steadyserve.client.deploy_files import deploy_request
from steadyserve.client.python_defaults import raw_document
from steadyserve.client.service_files import load_one, unnamed
from steadyserve.compat.file_mounts import staged
from steadyserve.compat.skypilot import OPEN_PORTS_NOTE, open_ports_note
from steadyserve.core.strategies import selectable_modes

F = TypeVar("F", bound=Callable[..., Any])

PIPED_WIDTH = 200
"""Width of tables written to a pipe or file (COLUMNS overrides): wide enough that
the usual table is one line per row, and a long cell folds instead of hiding."""
WAIT_POLL_S = 0.2


class SteadyGroup(click.Group):
    """The ``steady`` group: under ``--json`` anywhere on the command line, click's
    own errors (a missing argument, an unknown option) are a JSON object on stdout
    too, with click's exit code (cli/json_errors.py)."""

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv:
            return super().main(argv, *rest, **kwargs)
        try:
            return super().main(argv, *rest, **{**kwargs, "standalone_mode": False})
        except click.ClickException as exc:
            click.echo(json_errors.dumps(json_errors.from_click(exc)))
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo(json_errors.dumps(json_errors.error_object("aborted", 1)))
            sys.exit(1)


@click.group(cls=SteadyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="steadyserve")
def main() -> None:
    """SteadyServe: replicas behind one endpoint, updated without dropping a request.

    \b
    Example:
      steady up examples/http_server/service.yaml --wait
    """


main.add_command(dashboard)
for _command in progressive.COMMANDS:  # steady promote / pause / resume / abort
    main.add_command(_command)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-n", "--name", help="Service name (default: the file's name:, else its folder).")
@click.option("--wait", is_flag=True, help="Wait until every replica is READY.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds --wait waits.")
@click.option("--dry-run", is_flag=True, help="Print the plan; start nothing.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="The endpoint's port (the file's service.port; taken as named).",
)
@ignore_resources_option
@ignore_image_option
@env_option
@secret_option
@json_option
@reports_errors
def up(
    file: Path,
    name: str | None,
    wait: bool,
    timeout: float,
    dry_run: bool,
    port: int | None,
    ignore_resources: bool,
    ignore_image: bool,
    as_json: bool,
    envs: tuple[str, ...] = (),
    secrets: tuple[str, ...] = (),
    skyserve_names: bool = False,
) -> None:
    """Start a service from FILE.

    Without -n and name:, the service is named after the file's folder, or
    sky-service-xxxx when a service of that name runs or was taken down with
    its history kept (steady serve up: always sky-service-xxxx, as SkyServe).

    \b
    Example:
      steady up examples/http_server/service.yaml --wait
    """
    notes: list[str] = []
    spec = load_one(file, name, notes, ignore_resources, ignore_image, envs, secrets)
    if port is not None:  # the file stays as it is; the endpoint is this port
        spec = spec.model_copy(update={"service": spec.service.model_copy(update={"port": port})})
    if dry_run:  # every file error was raised above; nothing is started, not even a controller
        _print_notes(notes)
        plan = up_plan(spec)
        if as_json:
            _echo_json({**plan, "notes": notes})
        else:
            console.print(plan_line(plan), markup=False, highlight=False)
        return
    text = file.read_text(encoding="utf-8")
    client = Client(_home())
    if name is None and not (raw_document(file) or {}).get("name"):
        spec = spec.model_copy(update={"name": unnamed(client, spec.name, notes, skyserve_names)})
    _print_notes(notes)
    with staged(spec, file) as sent:  # file_mounts copied into the workdir
        created = client.call(
            "POST",
            "/api/v1/services",
            {"spec": sent.spec_json(), "yaml": text, "file": str(file.resolve())},
        )
    # Said once the service exists, and once per home (docs/security.md).
    open_ports = open_ports_note(spec, backend_name(), netns.unavailable())
    if open_ports is not None and client.home.first_time(OPEN_PORTS_NOTE):
        _print_notes([open_ports])
        notes.append(open_ports)
    scheme = "https" if spec.service.tls else "http"
    _print_notes(created.get("notes") or [])
    notes.extend(created.get("notes") or [])
    _print_created(created, as_json, scheme, pool=spec.service.pool is not None)
    if wait:
        _wait_ready(client, created["name"], timeout, as_json=as_json)
    if as_json:  # with --wait, the last of its JSON lines
        _echo_json({"notice": None, **created, "notes": notes}, line=wait)


@main.command()
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--mode",
    type=click.Choice(list(selectable_modes())),
    default=None,
    help="How replicas restart (default: the file's service.update_mode).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--wait", is_flag=True, help="Show progress; exit 1 if the update fails.")
@click.option("--timeout", default=900.0, show_default=True, help="Seconds --wait waits.")
@ignore_resources_option
@ignore_image_option
@env_option
@secret_option
@json_option
@reports_errors
def update(
    name: str,
    file: Path,
    mode: str | None,
    dry_run: bool,
    wait: bool,
    timeout: float,
    ignore_resources: bool,
    ignore_image: bool,
    as_json: bool,
    envs: tuple[str, ...] = (),
    secrets: tuple[str, ...] = (),
) -> None:
    """Update service NAME to the spec in FILE (a new version).

    The plan lists every changed field with its whole old and new value, and
    whether it applies in place or restarts replicas.

    \b
    Example:
      steady update http-server examples/http_server/service.yaml --dry-run
    """
    notes: list[str] = []
    spec = load_one(file, name, notes, ignore_resources, ignore_image, envs, secrets)
    _print_notes(notes)
    client = Client(_home())
    with staged(spec, file) as sent:  # file_mounts copied into the workdir
        result = client.call(
            "POST",
            f"/api/v1/services/{name}/update",
            {
                "spec": sent.spec_json(),
                "yaml": file.read_text(encoding="utf-8"),
                "file": str(file.resolve()),
                "mode": mode,
                "dry_run": dry_run,
            },
        )
    after_plan(client, result, wait, timeout, as_json)


@main.command()
@click.argument("name")
@click.option("--to", "to", type=int, default=None, help="The version to go back to.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--wait", is_flag=True, help="Show progress; exit 1 if it fails.")
@click.option("--timeout", default=900.0, show_default=True, help="Seconds --wait waits.")
@json_option
@reports_errors
def rollback(
    name: str, to: int | None, dry_run: bool, wait: bool, timeout: float, as_json: bool
) -> None:
    """Go back to an earlier version's spec (default: the one before), as a new version.

    \b
    Example:
      steady rollback http-server --to 1 --wait
    """
    client = Client(_home())
    result = client.call(
        "POST", f"/api/v1/services/{name}/rollback", {"to": to, "dry_run": dry_run}
    )
    after_plan(client, result, wait, timeout, as_json)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--wait", is_flag=True, help="Wait until every service has converged.")
@click.option("--timeout", default=900.0, show_default=True, help="Seconds --wait waits.")
@click.option(
    "--prune-all",
    is_flag=True,
    help="Also take down running services FILE did not make (steady up, other files).",
)
@yes_option
@ignore_resources_option
@ignore_image_option
@json_option
@reports_errors
def deploy(
    file: Path,
    dry_run: bool,
    wait: bool,
    timeout: float,
    prune_all: bool,
    yes: bool,
    ignore_resources: bool,
    ignore_image: bool,
    as_json: bool,
) -> None:
    """Make the services in FILE (services: [...]) the whole desired state.

    Services in FILE are created or updated; services this file made earlier
    and no longer lists are taken down, after a confirmation (-y skips it; without
    a terminal, -y is required). Services made with 'steady up' or another file
    are kept unless --prune-all.
    FILE may also be a Ray Serve config (applications: [...]): each deployment
    becomes a service <app>-<deployment>, served on the gateway port under its
    route_prefix (docs/ray-serve.md).

    \b
    Example:
      steady deploy fleet.yaml --dry-run
      steady deploy serve_config.yaml
    """
    notes: list[str] = []
    with deploy_request(file, prune_all, notes, ignore_resources, ignore_image) as (request, plan):
        _print_notes(notes)
        for notice in plan.notices:
            click.echo(f"notice: {notice}", err=True)
        client = Client(_home())
        if not dry_run:
            preview = client.call("POST", "/api/v1/deploy", request, timeout=600.0)
            removals = [i["name"] for i in preview["services"] if i["action"] == "down"]
            if removals:
                _confirm(f"deploy takes down {', '.join(removals)}", yes)
            request = {**request, "dry_run": False, "expect_down": removals}
        result = client.call("POST", "/api/v1/deploy", request, timeout=600.0)
    gateway = (result.get("gateway") or {}).get("port")
    if gateway is not None and not as_json and not dry_run:
        console.print(f"gateway: http://127.0.0.1:{gateway}")
    said: set[str] = set()  # a notice shared by several services is said once
    for item in result["services"]:
        if item["action"] == "create":
            _print_notes(item.get("notes") or [])
            if item.get("notice") and item["notice"] not in said:
                said.add(item["notice"])
                click.echo(f"warning: {item['name']}: {item['notice']}", err=True)
            if not as_json:
                where = f" at http://{item['endpoint']}" if item.get("endpoint") else ""
                console.print(
                    f"{item['name']}: {'would be created' if dry_run else 'created'}{where}"
                )
        elif as_json:
            continue
        elif item["action"] == "down":
            console.print(f"{item['name']}: {'would be taken down' if dry_run else 'taken down'}")
        elif item["action"] == "keep":
            console.print(f"{item['name']}: kept, not in the file ({item['reason']})")
        else:
            _print_plan(item)
    if wait and not dry_run:
        for item in result["services"]:
            if item["action"] == "create":
                _wait_ready(client, item["name"], timeout, as_json=as_json)
            elif item["action"] == "update":
                item["update"] = wait_update(
                    client, item["name"], item["version"], timeout, as_json=as_json
                )
    if as_json:
        _echo_json(result, line=wait and not dry_run)


@main.command()
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Take down every service.")
@click.option("--purge", is_flag=True, help="Also forget versions, events and logs.")
@yes_option
@json_option
@reports_errors
def down(names: tuple[str, ...], all_: bool, purge: bool, yes: bool, as_json: bool) -> None:
    """Stop services: their load balancers and every replica.

    Versions, events and logs are kept (steady history still works) until
    --purge, which also forgets them for a service that is already down.
    --all asks first on a terminal (-y skips it) and frees the gateway port.

    \b
    Example:
      steady down http-server
    """
    if bool(names) == all_:
        raise CommandError("name services to take down, or pass --all (not both)", 2)
    home = _home()
    client = Client(home)
    known = [s["name"] for s in client.call("GET", "/api/v1/services")["services"]]
    unknown = [n for n in names if n not in known]
    for name in unknown:
        # A service already down: --purge forgets its history; otherwise say so.
        result = client.call("GET", f"/api/v1/services/{name}/history")
        if result["down"] and not purge:
            raise CommandError(f"{name} is already down (--purge forgets its history)", 2)
    if all_ and known and not yes and sys.stdin.isatty():
        _confirm(f"take down every service ({', '.join(known)})", yes)
    taken = known if all_ else list(names)
    for name in taken:
        client.call("DELETE", f"/api/v1/services/{name}?purge={int(purge)}", timeout=600.0)
        if not as_json:
            console.print(f"Service {name} is down.")
    if all_:  # the gateway port too (serve.start holds it with no service at all)
        client.call("DELETE", "/api/v1/gateway")
    if as_json:
        _echo_json({"down": taken, "purged": purge})


main.add_command(controller)
main.add_command(status)
main.add_command(serve_group(up, status, update, logs, down))
main.add_command(jobs)
main.add_command(ray_group(deploy, status))  # Ray's serve CLI (cli/ray_cli.py)
main.add_command(history)
main.add_command(logs)
