"""``steady status``: the services of this home, their replicas and events; one
service's endpoint (``--endpoint``) for scripts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from steadyserve.cli import progressive, ray_status
from steadyserve.cli.common import (
    _echo_json,
    _home,
    _print_table,
    console,
    draining_lines,
    json_option,
    reports_errors,
    utc_option,
)
from steadyserve.cli.serve import endpoint_url
from steadyserve.cli.tables import (
    Clock,
    autoscaling_lines,
    events_table,
    replicas_table,
    services_table,
    update_notes,
)
from steadyserve.client.connection import (
    Client,
)

F = TypeVar("F", bound=Callable[..., Any])

PIPED_WIDTH = 200
"""Width of tables written to a pipe or file (COLUMNS overrides): wide enough that
the usual table is one line per row, and a long cell folds instead of hiding."""
WAIT_POLL_S = 0.2


@click.command()
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
@click.option("--endpoint", is_flag=True, help="Print only NAME's endpoint URL (one line).")
@utc_option
@reports_errors
def status(
    names: tuple[str, ...],
    as_json: bool,
    events: bool,
    verbose: bool,
    layout: str,
    endpoint: bool,
    utc: bool,
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
    if endpoint:  # sky serve status --endpoint NAME
        click.echo(endpoint_url(client, names))
        return
    running = {s["name"] for s in client.call("GET", "/api/v1/services")["services"]}
    # A named service that is down but kept its history: say so (and show its
    # events with --events); an unknown name is still an error (the events call 404s).
    down = [n for n in dict.fromkeys(names) if n not in running]
    gone = [{"name": n, **client.call("GET", f"/api/v1/services/{n}/events")} for n in down]
    query = "&".join(f"name={n}" for n in names if n in running)
    services = (
        client.call("GET", f"/api/v1/services?{query}")["services"] if query or not names else []
    )
    if layout == "ray":  # cli/ray_status.py
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
    for line in progressive.canary_lines(services):  # step, weight, analysis
        console.print(line, highlight=False, markup=False)
    for note in update_notes(services):
        console.print(note, style="red", markup=False)
    for svc in services:  # its load balancer cannot start (controller/lb_process.py)
        if svc.get("failure"):
            console.print(f"{svc['name']}: FAILED: {svc['failure']}", style="red", markup=False)
    console.print()
    console.print("Service Replicas", style="bold")
    _print_table(replicas_table(services))
    for svc in services:
        for line in draining_lines(svc):
            console.print(line, highlight=False, markup=False)
    for svc in services:  # replicas on a fixed port (controller/fixed_ports.py)
        for rep in svc["replicas"]:
            if rep.get("notice"):
                console.print(f"{svc['name']}: {rep['notice']}", style="red", markup=False)
            if rep.get("reason"):
                line = f"{svc['name']}: replica {rep['id']} {rep['status']}: {rep['reason']}"
                console.print(line, style="red", markup=False)
    for svc in services if events else []:
        console.print()
        console.print(f"Events of {svc['name']}", style="bold")
        _print_table(events_table(svc["events"], Clock(utc=utc)))
