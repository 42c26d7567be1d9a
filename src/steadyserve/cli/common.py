"""What every ``steady`` command shares: consoles, error reporting, JSON and
confirmation options, progress lines, plan printing and waiting for a service."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from steadyserve.cli.tables import (
    changes_table,
    fit,
)
from steadyserve.client.connection import (
    Client,
    CommandError,
)
from steadyserve.client.contracts import with_iso
from steadyserve.core.states import FAILED_REPLICA_STATES
from steadyserve.home.paths import Home
from steadyserve.spec import SpecError

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
    fit(table, console)
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
ignore_image_option = click.option(
    "--ignore-image",
    is_flag=True,
    help="Start even when the file names resources.image_id (replicas run on the host).",
)

follow_option = click.option(
    "--follow/--no-follow", default=True, show_default=True, help="Keep printing new lines."
)
tail_option = click.option(
    "--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines."
)
controller_log_option = click.option(
    "--controller", "controller_log", is_flag=True, help="The controller's log."
)
"""The log options SkyPilot's ``sky serve logs`` and ``sky jobs pool logs`` share."""

env_option = click.option(
    "--env",
    "envs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set envs.KEY, also for $KEY in service: (SkyPilot's --env; KEY alone: from here).",
)
secret_option = click.option(
    "--secret",
    "secrets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set secrets.KEY, never shown (SkyPilot's --secret; KEY alone: from here).",
)


def _print_notes(notes: list[str]) -> None:
    """What the loader and the SkyServe checks want the user to know (on stderr)."""
    for note in notes:
        click.echo(f"note: {note}", err=True)


def _print_created(
    created: dict[str, Any], as_json: bool, scheme: str = "http", pool: bool = False
) -> None:
    """The real endpoint first; then, on stderr, why it is not the usual port. A pool
    has no endpoint (nothing listens on it): how to give it jobs instead."""
    if not as_json and pool:
        name = created["name"]
        console.print(
            f"Pool [bold]{name}[/] is starting: its workers run setup, then take jobs"
            f" (steady jobs launch --pool {name} JOB.yaml)"
        )
        return
    if not as_json:
        console.print(
            f"Service [bold]{created['name']}[/] is starting at {scheme}://{created['endpoint']}"
        )
    if created.get("notice"):
        click.echo(f"warning: {created['notice']}", err=True)


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
                cause = _last_failure(client, name)
                raise CommandError(f"{name} FAILED{cause}; see 'steady status {name} --events'")
            if time.monotonic() > deadline:
                raise CommandError(f"{name} not ready after {timeout:.0f}s ({svc['status']})")
            time.sleep(WAIT_POLL_S)
    if target == 0:
        out.print(f"{name}: at zero replicas; the first request starts one")
    else:
        out.print(f"{name}: READY, {ready}/{target} replicas")


FAILED_NAMES = frozenset(state.value for state in FAILED_REPLICA_STATES)


def _last_failure(client: Client, name: str) -> str:
    """``: replica 3 FAILED: <reason>`` from the service's newest replica failure,
    so a failed ``--wait`` says why without a second command; "" when none."""
    events = client.call("GET", f"/api/v1/services/{name}/events?limit=50")["events"]
    for event in reversed(events):
        if event["replica_id"] is not None and event["to_status"] in FAILED_NAMES:
            return f": replica {event['replica_id']} {event['to_status']}: {event['reason']}"
    return ""


def _print_plan(result: dict[str, Any]) -> None:
    name = result["name"]
    if not result["changed"]:
        console.print(f"{name}: no change (version {result['version']} stays)")
        return
    verb = "would change" if result["dry_run"] else f"-> version {result['version']}"
    how = "in place (no restart)" if result["mode"] == "in_place" else f"restart, {result['mode']}"
    console.print(f"{name}: {verb}, {how}; launch {result['launch']}, stop {result['stop']}")
    _print_table(changes_table(result["changes"]))


def wait_update(
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


def after_plan(
    client: Client, result: dict[str, Any], wait: bool, timeout: float, as_json: bool
) -> None:
    if not as_json:
        _print_plan(result)
    if wait and result["changed"] and not result["dry_run"]:
        result["update"] = wait_update(
            client, result["name"], result["version"], timeout, to_stderr=as_json
        )
    if as_json:
        _echo_json(result)
