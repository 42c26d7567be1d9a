"""The ``steady`` command: up, status, logs, down, controller.

Bad input (a wrong field, a missing file, an unknown service, a port in use)
prints one line naming what is wrong and exits 2, having changed nothing;
other failures exit 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from steadyserve.cli import logs as logs_mod
from steadyserve.cli import progressive, ray_status
from steadyserve.cli.client import (
    Client,
    CommandError,
    controller_alive,
    start_controller,
    stop_controller,
)
from steadyserve.cli.contracts import with_iso
from steadyserve.cli.dashboard import dashboard
from steadyserve.cli.python_defaults import raw_document, with_deployment_defaults
from steadyserve.cli.tables import (
    Clock,
    autoscaling_lines,
    changes_table,
    events_table,
    history_table,
    replicas_table,
    services_table,
    update_notes,
)
from steadyserve.file_mounts import staged
from steadyserve.paths import Home
from steadyserve.skyserve_compat import MaskedOutput, preflight, secret_values, unique_name
from steadyserve.spec import SpecError, load_service_file
from steadyserve.spec.ray_serve import load_deploy_file

F = TypeVar("F", bound=Callable[..., Any])

PIPED_WIDTH = 200
"""Width of tables written to a pipe or file (COLUMNS overrides): wide enough that
the usual table is one line per row, and a long cell folds instead of hiding."""
WAIT_POLL_S = 0.2


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH
    return Console(file=stream, width=width, highlight=False)


console = _console()
err_console = _console(stderr=True)


def _home() -> Home:
    return Home.from_env()


def reports_errors(func: F) -> F:
    """Turn CommandError/SpecError into lines on stderr and the right exit code:
    one line per mistake of a file, one line for anything else."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SpecError as exc:
            for line in exc.lines():
                click.echo(f"error: {line}", err=True)
            sys.exit(2)
        except CommandError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def _print_table(table: Table) -> None:
    """A table; piped, without the padding rich leaves at the end of each line."""
    if console.is_terminal:
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(with_iso(data), indent=2))


yes_option = click.option("-y", "--yes", is_flag=True, help="Do not ask before taking down.")


def _confirm(what: str, yes: bool) -> None:
    """Ask before taking services down: on a terminal a y/N question; without one
    (a script, CI) the command refuses unless -y says the removal is intended."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CommandError(f"{what}: pass -y to confirm (no terminal to ask on)", 2)
    if not click.confirm(f"{what}. Continue?", default=False, err=True):
        raise CommandError("nothing changed", 1)


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON for scripts (see docs/cli.md)."
)
utc_option = click.option("--utc", is_flag=True, help="Show times in UTC, not local time.")
ignore_resources_option = click.option(
    "--ignore-resources",
    is_flag=True,
    help="Start even when this machine lacks the file's resources (GPUs, CPUs, memory).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@ignore_resources_option
@json_option
@reports_errors
def up(
    file: Path,
    name: str | None,
    wait: bool,
    timeout: float,
    ignore_resources: bool,
    as_json: bool,
) -> None:
    """Start a service from FILE.

    Without -n and name:, the service is named after the file's folder, or
    sky-service-xxxx when a service of that name already runs.

    \b
    Example:
      steady up examples/http_server/service.yaml --wait
    """
    notes: list[str] = []
    spec = _load_one(file, name, notes, ignore_resources)
    text = file.read_text(encoding="utf-8")
    client = Client(_home())
    if name is None and not (raw_document(file) or {}).get("name"):
        # SkyServe hook: a second file from the same folder gets a new name.
        taken = {s["name"] for s in client.call("GET", "/api/v1/services")["services"]}
        if spec.name in taken:
            new = unique_name(taken)
            notes.append(f"name: {spec.name} is taken, so this service is {new} (-n chooses)")
            spec = spec.model_copy(update={"name": new})
    _print_notes(notes)
    with staged(spec, file) as sent:  # skyserve hook: file_mounts copied into the workdir
        created = client.call(
            "POST",
            "/api/v1/services",
            {"spec": sent.spec_json(), "yaml": text, "file": str(file.resolve())},
        )
    _print_created(created, as_json, "https" if spec.service.tls else "http")
    if wait:
        _wait_ready(client, created["name"], timeout, to_stderr=as_json)
    if as_json:
        _echo_json({"notice": None, **created, "notes": notes})


def _print_notes(notes: list[str]) -> None:
    """What the loader and the SkyServe checks want the user to know (on stderr)."""
    for note in notes:
        click.echo(f"note: {note}", err=True)


def _print_created(created: dict[str, Any], as_json: bool, scheme: str = "http") -> None:
    """The real endpoint first; then, on stderr, why it is not the usual port."""
    if not as_json:
        console.print(
            f"Service [bold]{created['name']}[/] is starting at {scheme}://{created['endpoint']}"
        )
    if created.get("notice"):
        click.echo(f"warning: {created['notice']}", err=True)


def _load_one(
    file: Path, name: str | None, notes: list[str] | None = None, ignore_resources: bool = False
) -> Any:
    notes = [] if notes is None else notes
    spec = load_service_file(file, name, notes)
    spec = _with_defaults(spec, raw_document(file), file, "")
    try:
        notes.extend(preflight(spec, ignore_resources=ignore_resources))
    except SpecError as exc:
        raise SpecError.combine([exc], file=str(file)) from None
    return spec


def _with_defaults(spec: Any, raw: Any, file: Path, prefix: str) -> Any:
    """Fill what a Python replica's @deployment decorator sets and the file does not."""
    try:
        return with_deployment_defaults(spec, raw if isinstance(raw, dict) else {}, file.parent)
    except SpecError as exc:
        raise SpecError(
            f"{prefix}{exc.path}" if exc.path else None, exc.message, file=str(file)
        ) from exc


class Progress:
    """What ``--wait`` shows while it waits: on a terminal, one live line (a
    spinner, rewritten in place, gone at the end); piped, one plain line per
    change of state, each printed once."""

    def __init__(self, out: Console, label: str) -> None:
        self.out = out
        self.live = out.is_terminal
        self.label = label
        self._last = ""
        self._status: Any = None

    def __enter__(self) -> Progress:
        if self.live:
            self._status = self.out.status(self.label)
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def show(self, line: str) -> None:
        if line == self._last:
            return
        self._last = line
        if self._status is not None:
            self._status.update(line)
        else:
            self.out.print(line, markup=False, soft_wrap=True)


def _wait_ready(client: Client, name: str, timeout: float, to_stderr: bool = False) -> None:
    """Progress until every replica is READY (on stderr when stdout carries JSON)."""
    deadline = time.monotonic() + timeout
    out = err_console if to_stderr else console
    with Progress(out, f"waiting for {name}") as progress:
        while True:
            svc = client.call("GET", f"/api/v1/services?name={name}")["services"][0]
            ready, target = svc["ready_replicas"], svc["target_replicas"]
            if svc["status"] == "READY" and ready >= target:
                break
            if svc["status"] == "NO_REPLICA" and target == 0:  # scaled to zero: nothing to wait for
                break
            progress.show(f"{name}: {svc['status']}, {ready}/{target} ready")
            if svc["status"] == "FAILED":
                raise CommandError(f"{name} FAILED; see 'steady status {name} --events'")
            if time.monotonic() > deadline:
                raise CommandError(f"{name} not ready after {timeout:.0f}s ({svc['status']})")
            time.sleep(WAIT_POLL_S)
    if target == 0:
        out.print(f"{name}: at zero replicas; the first request starts one")
    else:
        out.print(f"{name}: READY, {ready}/{target} replicas")


@main.command()
@click.argument("names", nargs=-1)
@json_option
@click.option("--events", is_flag=True, help="Also show each service's state transitions.")
@click.option(
    "-v", "--verbose", is_flag=True, help="Add AUTOSCALING_POLICY and LOAD_BALANCING_POLICY."
)
@click.option(
    "--format",
    "layout",
    type=click.Choice(["steady", "ray"]),
    default="steady",
    help="ray: Ray Serve's serve status layout (applications, deployments, replica_states).",
)
@utc_option
@reports_errors
def status(
    names: tuple[str, ...], as_json: bool, events: bool, verbose: bool, layout: str, utc: bool
) -> None:
    """Show services and their replicas (all services, or the NAMES given).

    A service whose last update failed or was rolled back has a line under the
    table saying why, until its next update.

    \b
    Example:
      steady status http-server --events
      steady status --format ray
    """
    client = Client(_home())
    running = {s["name"] for s in client.call("GET", "/api/v1/services")["services"]}
    # A named service that is down but kept its history: say so (and show its
    # events with --events); an unknown name is still an error (the events call 404s).
    down = [n for n in dict.fromkeys(names) if n not in running]
    gone = [{"name": n, **client.call("GET", f"/api/v1/services/{n}/events")} for n in down]
    query = "&".join(f"name={n}" for n in names if n in running)
    services = (
        client.call("GET", f"/api/v1/services?{query}")["services"] if query or not names else []
    )
    if layout == "ray":  # rsconfig hook: cli/ray_status.py
        if as_json:
            _echo_json(ray_status.ray_status(services))
        else:
            click.echo(ray_status.render(services), nl=False)
        return
    if events:
        for svc in services:
            svc["events"] = client.call("GET", f"/api/v1/services/{svc['name']}/events")["events"]
    if as_json:
        kept = [{"name": g["name"], **({"events": g["events"]} if events else {})} for g in gone]
        _echo_json({"services": services, **({"down": kept} if names else {})})
        return
    for item in gone:
        console.print(
            f"{item['name']} is down; its history is kept ('steady history {item['name']}',"
            f" 'steady down {item['name']} --purge' forgets it)",
            markup=False,
        )
        if events:
            console.print(f"Events of {item['name']}", style="bold")
            _print_table(events_table(item["events"], Clock(utc=utc)))
    if names and not services:
        return
    console.print("Services", style="bold")
    _print_table(services_table(services, verbose))
    for line in autoscaling_lines(services):
        console.print(line, highlight=False, markup=False)
    for line in progressive.canary_lines(services):  # canary hook: step, weight, analysis
        console.print(line, highlight=False, markup=False)
    for note in update_notes(services):
        console.print(note, style="red", markup=False)
    console.print()
    console.print("Service Replicas", style="bold")
    _print_table(replicas_table(services))
    for svc in services:  # skyserve hook: replicas on a fixed port (controller/fixed_ports.py)
        for rep in svc["replicas"]:
            if rep.get("notice"):
                console.print(f"{svc['name']}: {rep['notice']}", style="red", markup=False)
    for svc in services if events else []:
        console.print()
        console.print(f"Events of {svc['name']}", style="bold")
        _print_table(events_table(svc["events"], Clock(utc=utc)))


def _print_plan(result: dict[str, Any]) -> None:
    name = result["name"]
    if not result["changed"]:
        console.print(f"{name}: no change (version {result['version']} stays)")
        return
    verb = "would change" if result["dry_run"] else f"-> version {result['version']}"
    how = "in place (no restart)" if result["mode"] == "in_place" else f"restart, {result['mode']}"
    console.print(f"{name}: {verb}, {how}; launch {result['launch']}, stop {result['stop']}")
    _print_table(changes_table(result["changes"]))


def _wait_update(
    client: Client, name: str, version: int, timeout: float, to_stderr: bool = False
) -> dict[str, Any]:
    """Show old/new ready counts until the update ends; fail (exit 1) if it failed."""
    deadline = time.monotonic() + timeout
    out = err_console if to_stderr else console
    with Progress(out, f"updating {name}") as progress:
        while True:
            svc = client.call("GET", f"/api/v1/services?name={name}")["services"][0]
            update = svc.get("update") or {}
            if update.get("to_version") == version and update.get("status") != "IN_PROGRESS":
                break
            if update.get("to_version", version) != version:
                raise CommandError(f"{name}: update to version {version} was superseded")
            ready = [r for r in svc["replicas"] if r["status"] == "READY"]
            new = sum(1 for r in ready if r["version"] == version)
            routing = ",".join(str(v) for v in svc["active_versions"]) or "-"
            progress.show(
                f"{name}: version {version} {new}/{svc['target_replicas']} ready, "
                f"older {len(ready) - new} ready, routing to version {routing}"
            )
            if time.monotonic() > deadline:
                raise CommandError(f"{name}: update not done after {timeout:.0f}s")
            time.sleep(WAIT_POLL_S)
    if update["status"] != "SUCCEEDED":
        raise CommandError(f"{name}: update {update['status']}: {update['message']}")
    out.print(f"{name}: update to version {version} SUCCEEDED")
    return dict(update)


def _after_plan(
    client: Client, result: dict[str, Any], wait: bool, timeout: float, as_json: bool
) -> None:
    if not as_json:
        _print_plan(result)
    if wait and result["changed"] and not result["dry_run"]:
        result["update"] = _wait_update(
            client, result["name"], result["version"], timeout, to_stderr=as_json
        )
    if as_json:
        _echo_json(result)


@main.command()
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--mode",
    type=click.Choice(["rolling", "blue_green", "canary"]),
    default=None,
    help="How replicas restart (default: the file's service.update_mode).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--wait", is_flag=True, help="Show progress; exit 1 if the update fails.")
@click.option("--timeout", default=900.0, show_default=True, help="Seconds --wait waits.")
@ignore_resources_option
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
    as_json: bool,
) -> None:
    """Update service NAME to the spec in FILE (a new version).

    The plan lists every changed field with its whole old and new value, and
    whether it applies in place or restarts replicas.

    \b
    Example:
      steady update http-server examples/http_server/service.yaml --dry-run
    """
    notes: list[str] = []
    spec = _load_one(file, name, notes, ignore_resources)
    _print_notes(notes)
    client = Client(_home())
    with staged(spec, file) as sent:  # skyserve hook: file_mounts copied into the workdir
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
    _after_plan(client, result, wait, timeout, as_json)


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
    _after_plan(client, result, wait, timeout, as_json)


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
    plan = load_deploy_file(file)  # a fleet file or a Ray Serve config (spec/ray_serve.py)
    where = "services[{}]." if plan.scope == "all" else "applications: {}: "
    specs = [
        _with_defaults(spec, item, file, where.format(i if plan.scope == "all" else spec.name))
        for i, (spec, item) in enumerate(zip(plan.specs, plan.documents, strict=True))
    ]
    notes: list[str] = []
    mistakes: list[SpecError] = []
    for i, spec in enumerate(specs):
        try:
            notes.extend(
                preflight(
                    spec,
                    ignore_resources=ignore_resources,
                    prefix=where.format(i if plan.scope == "all" else spec.name),
                )
            )
        except SpecError as exc:
            mistakes.append(exc)
    if mistakes:
        raise SpecError.combine(mistakes, file=str(file))
    _print_notes(notes)
    for notice in plan.notices:
        click.echo(f"notice: {notice}", err=True)
    client = Client(_home())
    text = file.read_text(encoding="utf-8")
    with contextlib.ExitStack() as stack:  # skyserve hook: file_mounts into the workdir
        sent = [stack.enter_context(staged(s, file)) for s in specs]
        request = {
            "services": [{"spec": s.spec_json(), "yaml": text} for s in sent],
            "dry_run": True,
            "file": str(file.resolve()),
            "prune_all": prune_all,
            "gateway": None if plan.gateway_port is None else {"port": plan.gateway_port},
        }
        if not dry_run:
            preview = client.call("POST", "/api/v1/deploy", request, timeout=600.0)
            removals = [i["name"] for i in preview["services"] if i["action"] == "down"]
            if removals:
                _confirm(f"deploy takes down {', '.join(removals)}", yes)
            request = {**request, "dry_run": False, "expect_down": removals}
        result = client.call("POST", "/api/v1/deploy", request, timeout=600.0)
    if plan.gateway_port is not None and not as_json and not dry_run:
        console.print(f"gateway: http://127.0.0.1:{plan.gateway_port}")
    for item in result["services"]:
        if item["action"] == "create":
            if item.get("notice"):
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
                _wait_ready(client, item["name"], timeout, to_stderr=as_json)
            elif item["action"] == "update":
                item["update"] = _wait_update(
                    client, item["name"], item["version"], timeout, to_stderr=as_json
                )
    if as_json:
        _echo_json(result)


@main.command()
@click.argument("name")
@json_option
@utc_option
@reports_errors
def history(name: str, as_json: bool, utc: bool) -> None:
    """List a service's versions: when, how, what changed, and how it ended.

    \b
    Example:
      steady history http-server
    """
    client = Client(_home())
    result = client.call("GET", f"/api/v1/services/{name}/history")
    versions = result["versions"]
    if as_json:
        _echo_json({"name": name, "down": result["down"], "versions": versions})
        return
    if result["down"]:
        console.print(f"{name} is down (history kept until 'steady down {name} --purge')")
    _print_table(history_table(versions, Clock(utc=utc)))


@main.command()
@click.argument("name")
@click.argument("replica_id", required=False, type=int)
@click.option("--controller", "controller_log", is_flag=True, help="The controller's log.")
@click.option("--load-balancer", "lb_log", is_flag=True, help="The service's load balancer log.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines.")
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines.")
@click.option(
    "--timestamps",
    is_flag=True,
    help="Prefix lines read while following with the time they arrived.",
)
@utc_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (docs/cli.md).")
@reports_errors
def logs(
    name: str,
    replica_id: int | None,
    controller_log: bool,
    lb_log: bool,
    follow: bool,
    tail: int | None,
    timestamps: bool,
    utc: bool,
    as_json: bool,
) -> None:
    """Print a replica's log (the newest replica's when no REPLICA_ID is given).

    A replica writes its output straight to its log file, which does not record
    when each line was written: --timestamps stamps the lines that arrive while
    --follow reads, and shows "-" for lines already in the file.

    \b
    Example:
      steady logs http-server 2 --tail 20 --follow --timestamps
    """
    home = _home()
    if controller_log and lb_log:
        raise CommandError("--controller and --load-balancer are exclusive", 2)
    if controller_log:
        path = home.controller_log
    else:
        if not home.service_dir(name).is_dir():
            raise CommandError(f"unknown service: {name}", 2)
        if lb_log:
            path = home.lb_log(name)
        elif replica_id is not None:
            path = home.replica_log(name, replica_id)
            if not path.exists():
                raise CommandError(f"no log for replica {replica_id} of service {name}", 2)
        else:
            found = sorted(
                (home.service_dir(name) / "replicas").glob("*.log"), key=lambda p: int(p.stem)
            )
            if not found:
                raise CommandError(f"service {name} has no replica logs yet", 2)
            path = found[-1]
    if not path.exists():
        raise CommandError(f"no log yet at {path}", 1)
    out: Any = sys.stdout.buffer
    if not controller_log:  # skyserve hook: secrets values never shown
        out = MaskedOutput(out, secret_values(home.db_path, name))
    writer = logs_mod.LineWriter(
        out, str(path), timestamps=timestamps, as_json=as_json, clock=Clock(utc=utc)
    )
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        logs_mod.show(path, tail, follow, writer=writer)


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
    --all asks first on a terminal (-y skips it).

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
    if as_json:
        _echo_json({"down": taken, "purged": purge})


@main.group()
def controller() -> None:
    """Start, stop or inspect the controller of this STEADY_HOME.

    Any other command starts the controller when none runs; these are for
    scripts and for stopping it.

    \b
    Example:
      steady controller status
    """


@controller.command("start")
@click.option(
    "--backend",
    type=click.Choice(["local", "ray"]),
    default=None,
    help="Where replicas run (default local; also STEADY_BACKEND).",
)
@click.option(
    "--ray-address",
    default=None,
    help="The Ray cluster: auto, HOST:PORT or ray://HOST:PORT (also STEADY_RAY_ADDRESS).",
)
@reports_errors
def controller_start(backend: str | None, ray_address: str | None) -> None:
    """Start the controller (if none runs) and print its pid and address.

    With --backend ray, replicas run as actors on an existing Ray cluster
    (docs/ray.md); the choice lasts until the controller stops.

    \b
    Example:
      steady controller start --backend ray --ray-address auto
    """
    if ray_address is not None and (backend or os.environ.get("STEADY_BACKEND")) != "ray":
        raise CommandError("--ray-address needs --backend ray", 2)
    if backend is not None:
        os.environ["STEADY_BACKEND"] = backend
    if ray_address is not None:
        os.environ["STEADY_RAY_ADDRESS"] = ray_address
    info = start_controller(_home())
    console.print(f"controller running: pid {info['pid']} at {info['url']}")


@controller.command("stop")
@reports_errors
def controller_stop() -> None:
    """Stop the controller; services keep serving and are re-adopted on its next start.

    \b
    Example:
      steady controller stop
    """
    if stop_controller(_home()):
        console.print("controller stopped")
    else:
        console.print("no controller running")


@controller.command("status")
@json_option
@reports_errors
def controller_status(as_json: bool) -> None:
    """Say whether the controller runs, with its pid and address; exit 1 if not.

    \b
    Example:
      steady controller status --json
    """
    info = controller_alive(_home())
    if as_json:
        _echo_json(
            {"running": True, **info} if info else {"running": False, "pid": None, "url": None}
        )
    elif info:
        console.print(f"controller running: pid {info['pid']} at {info['url']}")
    else:
        console.print("no controller running")
    if not info:
        sys.exit(1)
