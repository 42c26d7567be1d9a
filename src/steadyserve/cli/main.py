"""The ``steady`` command: up, status, logs, down, controller.

Bad input (a wrong field, a missing file, an unknown service, a port in use)
prints one line naming what is wrong and exits 2, having changed nothing;
other failures exit 1.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from steadyserve.cli import logs as logs_mod
from steadyserve.cli.client import (
    Client,
    CommandError,
    controller_alive,
    start_controller,
    stop_controller,
)
from steadyserve.cli.dashboard import dashboard
from steadyserve.cli.python_defaults import raw_document, with_deployment_defaults
from steadyserve.cli.tables import (
    changes_table,
    events_table,
    history_table,
    replicas_table,
    services_table,
)
from steadyserve.paths import Home
from steadyserve.spec import SpecError, load_fleet_file, load_service_file

F = TypeVar("F", bound=Callable[..., Any])

console = Console(width=200, highlight=False, soft_wrap=True)
WAIT_POLL_S = 0.2


def _home() -> Home:
    return Home.from_env()


def reports_errors(func: F) -> F:
    """Turn CommandError/SpecError into one line on stderr and the right exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SpecError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except CommandError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="steadyserve")
def main() -> None:
    """SteadyServe: replicas behind one endpoint, updated without dropping a request."""


main.add_command(dashboard)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-n", "--name", help="Service name (default: the file's name:, else its folder).")
@click.option("--wait", is_flag=True, help="Wait until every replica is READY.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds --wait waits.")
@reports_errors
def up(file: Path, name: str | None, wait: bool, timeout: float) -> None:
    """Start a service from FILE."""
    spec = _load_one(file, name)
    text = file.read_text(encoding="utf-8")
    client = Client(_home())
    created = client.call(
        "POST",
        "/api/v1/services",
        {"spec": spec.spec_json(), "yaml": text, "file": str(file.resolve())},
    )
    console.print(f"Service [bold]{created['name']}[/] is starting at http://{created['endpoint']}")
    if wait:
        _wait_ready(client, created["name"], timeout)


def _load_one(file: Path, name: str | None) -> Any:
    spec = load_service_file(file, name)
    return _with_defaults(spec, raw_document(file), file, "")


def _with_defaults(spec: Any, raw: Any, file: Path, prefix: str) -> Any:
    """Fill what a Python replica's @deployment decorator sets and the file does not."""
    try:
        return with_deployment_defaults(spec, raw if isinstance(raw, dict) else {}, file.parent)
    except SpecError as exc:
        raise SpecError(
            f"{prefix}{exc.path}" if exc.path else None, exc.message, file=str(file)
        ) from exc


def _wait_ready(client: Client, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with console.status(f"waiting for {name}") as status:
        while True:
            svc = client.call("GET", f"/api/v1/services?name={name}")["services"][0]
            ready, target = svc["ready_replicas"], svc["target_replicas"]
            status.update(f"{name}: {svc['status']} {ready}/{target} ready")
            if svc["status"] == "READY" and ready >= target:
                console.print(f"{name}: READY, {ready}/{target} replicas")
                return
            if svc["status"] == "FAILED":
                raise CommandError(f"{name} FAILED; see 'steady status {name} --events'")
            if time.monotonic() > deadline:
                raise CommandError(f"{name} not ready after {timeout:.0f}s ({svc['status']})")
            time.sleep(WAIT_POLL_S)


@main.command()
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--events", is_flag=True, help="Also show each service's state transitions.")
@reports_errors
def status(names: tuple[str, ...], as_json: bool, events: bool) -> None:
    """Show services and their replicas."""
    client = Client(_home())
    query = "&".join(f"name={n}" for n in names)
    services = client.call("GET", f"/api/v1/services?{query}")["services"]
    if events:
        for svc in services:
            svc["events"] = client.call("GET", f"/api/v1/services/{svc['name']}/events")["events"]
    if as_json:
        click.echo(json.dumps({"services": services}, indent=2))
        return
    console.print("Services", style="bold")
    console.print(services_table(services))
    console.print()
    console.print("Service Replicas", style="bold")
    console.print(replicas_table(services))
    for svc in services if events else []:
        console.print()
        console.print(f"Events of {svc['name']}", style="bold")
        console.print(events_table(svc["events"]))


def _print_plan(result: dict[str, Any]) -> None:
    name = result["name"]
    if not result["changed"]:
        console.print(f"{name}: no change (version {result['version']} stays)")
        return
    verb = "would change" if result["dry_run"] else f"-> version {result['version']}"
    how = "in place (no restart)" if result["mode"] == "in_place" else f"restart, {result['mode']}"
    console.print(f"{name}: {verb}, {how}; launch {result['launch']}, stop {result['stop']}")
    console.print(changes_table(result["changes"]))


def _wait_update(client: Client, name: str, version: int, timeout: float) -> None:
    """Show old/new ready counts until the update ends; fail (exit 1) if it failed."""
    deadline = time.monotonic() + timeout
    with console.status(f"updating {name}") as status:
        while True:
            svc = client.call("GET", f"/api/v1/services?name={name}")["services"][0]
            update = svc.get("update") or {}
            ready = [r for r in svc["replicas"] if r["status"] == "READY"]
            new = sum(1 for r in ready if r["version"] == version)
            status.update(
                f"{name}: version {version} {new}/{svc['target_replicas']} ready, "
                f"older {len(ready) - new} ready, routing to {svc['active_versions']}"
            )
            if update.get("to_version") == version and update.get("status") != "IN_PROGRESS":
                if update["status"] == "SUCCEEDED":
                    console.print(f"{name}: update to version {version} SUCCEEDED")
                    return
                raise CommandError(f"{name}: update {update['status']}: {update['message']}")
            if update.get("to_version", version) != version:
                raise CommandError(f"{name}: update to version {version} was superseded")
            if time.monotonic() > deadline:
                raise CommandError(f"{name}: update not done after {timeout:.0f}s")
            time.sleep(WAIT_POLL_S)


@main.command()
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--mode",
    type=click.Choice(["rolling", "blue_green"]),
    default=None,
    help="How replicas restart (default: the file's service.update_mode).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--wait", is_flag=True, help="Show progress; exit 1 if the update fails.")
@click.option("--timeout", default=900.0, show_default=True, help="Seconds --wait waits.")
@reports_errors
def update(
    name: str, file: Path, mode: str | None, dry_run: bool, wait: bool, timeout: float
) -> None:
    """Update service NAME to the spec in FILE (a new version)."""
    spec = _load_one(file, name)
    client = Client(_home())
    result = client.call(
        "POST",
        f"/api/v1/services/{name}/update",
        {
            "spec": spec.spec_json(),
            "yaml": file.read_text(encoding="utf-8"),
            "file": str(file.resolve()),
            "mode": mode,
            "dry_run": dry_run,
        },
    )
    _print_plan(result)
    if wait and result["changed"] and not dry_run:
        _wait_update(client, name, result["version"], timeout)


@main.command()
@click.argument("name")
@click.option("--to", "to", type=int, default=None, help="The version to go back to.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--wait", is_flag=True, help="Show progress; exit 1 if it fails.")
@click.option("--timeout", default=900.0, show_default=True)
@reports_errors
def rollback(name: str, to: int | None, dry_run: bool, wait: bool, timeout: float) -> None:
    """Go back to an earlier version's spec, as a new version."""
    client = Client(_home())
    result = client.call(
        "POST", f"/api/v1/services/{name}/rollback", {"to": to, "dry_run": dry_run}
    )
    _print_plan(result)
    if wait and result["changed"] and not dry_run:
        _wait_update(client, name, result["version"], timeout)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--wait", is_flag=True, help="Wait until every service has converged.")
@click.option("--timeout", default=900.0, show_default=True)
@reports_errors
def deploy(file: Path, dry_run: bool, wait: bool, timeout: float) -> None:
    """Make the services in FILE (services: [...]) the whole desired state."""
    specs = load_fleet_file(file)
    items = (raw_document(file) or {}).get("services") or []
    specs = [
        _with_defaults(spec, item, file, f"services[{i}].")
        for i, (spec, item) in enumerate(zip(specs, items, strict=True))
    ]
    client = Client(_home())
    text = file.read_text(encoding="utf-8")
    result = client.call(
        "POST",
        "/api/v1/deploy",
        {
            "services": [{"spec": s.spec_json(), "yaml": text} for s in specs],
            "dry_run": dry_run,
            "file": str(file.resolve()),
        },
        timeout=600.0,
    )
    for item in result["services"]:
        if item["action"] == "create":
            console.print(f"{item['name']}: {'would be created' if dry_run else 'created'}")
        elif item["action"] == "down":
            console.print(f"{item['name']}: {'would be taken down' if dry_run else 'taken down'}")
        else:
            _print_plan(item)
    if wait and not dry_run:
        for item in result["services"]:
            if item["action"] == "create":
                _wait_ready(client, item["name"], timeout)
            elif item["action"] == "update":
                _wait_update(client, item["name"], item["version"], timeout)


@main.command()
@click.argument("name")
@reports_errors
def history(name: str) -> None:
    """List a service's versions: when, how, what changed, and how it ended."""
    client = Client(_home())
    versions = client.call("GET", f"/api/v1/services/{name}/history")["versions"]
    console.print(history_table(versions))


@main.command()
@click.argument("name")
@click.argument("replica_id", required=False, type=int)
@click.option("--controller", "controller_log", is_flag=True, help="The controller's log.")
@click.option("--load-balancer", "lb_log", is_flag=True, help="The service's load balancer log.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines.")
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines.")
@reports_errors
def logs(
    name: str,
    replica_id: int | None,
    controller_log: bool,
    lb_log: bool,
    follow: bool,
    tail: int | None,
) -> None:
    """Print a replica's log (the newest replica's when no REPLICA_ID is given)."""
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
    with contextlib.suppress(KeyboardInterrupt):
        logs_mod.show(path, tail, follow)


@main.command()
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Take down every service.")
@click.option("--purge", is_flag=True, help="Also forget versions, events and logs.")
@reports_errors
def down(names: tuple[str, ...], all_: bool, purge: bool) -> None:
    """Stop services: their load balancers and every replica."""
    if bool(names) == all_:
        raise CommandError("name services to take down, or pass --all (not both)", 2)
    home = _home()
    client = Client(home)
    known = [s["name"] for s in client.call("GET", "/api/v1/services")["services"]]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CommandError(f"unknown service: {', '.join(unknown)}", 2)
    for name in known if all_ else list(names):
        client.call("DELETE", f"/api/v1/services/{name}?purge={int(purge)}", timeout=600.0)
        console.print(f"Service {name} is down.")


@main.group()
def controller() -> None:
    """Start, stop or inspect the controller of this STEADY_HOME."""


@controller.command("start")
@reports_errors
def controller_start() -> None:
    info = start_controller(_home())
    console.print(f"controller running: pid {info['pid']} at {info['url']}")


@controller.command("stop")
@reports_errors
def controller_stop() -> None:
    """Stop the controller; services keep serving and are re-adopted on its next start."""
    if stop_controller(_home()):
        console.print("controller stopped")
    else:
        console.print("no controller running")


@controller.command("status")
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def controller_status(as_json: bool) -> None:
    info = controller_alive(_home())
    if as_json:
        click.echo(json.dumps(info or {"pid": None, "url": None, "running": False}))
    elif info:
        console.print(f"controller running: pid {info['pid']} at {info['url']}")
    else:
        console.print("no controller running")
    if not info:
        sys.exit(1)
