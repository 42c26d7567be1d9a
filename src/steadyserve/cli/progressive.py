"""``steady promote|pause|resume|abort NAME``: steer the update in flight.

A canary takes all four (docs/canary.md); a rolling or blue-green update takes
``abort`` (roll back now). Anything else is refused with one line, exit 2.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from steadyserve.client.connection import Client, CommandError
from steadyserve.home.paths import Home


def _send(name: str, action: str, body: dict[str, bool] | None = None) -> None:
    try:
        result = Client(Home.from_env()).call(
            "POST", f"/api/v1/services/{name}/{action}", body or {}
        )
    except CommandError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    click.echo(f"{name}: {result['message']}")


@click.command()
@click.argument("name")
@click.option("--full", is_flag=True, help="Skip every remaining step: all traffic now.")
def promote(name: str, full: bool) -> None:
    """Move the canary of NAME past its current pause (or to 100% with --full).

    \b
    Example:
      steady promote web --full
    """
    _send(name, "promote", {"full": full})


@click.command()
@click.argument("name")
def pause(name: str) -> None:
    """Hold the canary of NAME at its current step until steady resume.

    \b
    Example:
      steady pause web
    """
    _send(name, "pause")


@click.command()
@click.argument("name")
def resume(name: str) -> None:
    """Carry on with a paused canary of NAME (a timed pause starts again).

    \b
    Example:
      steady resume web
    """
    _send(name, "resume")


@click.command()
@click.argument("name")
def abort(name: str) -> None:
    """Abort the update of NAME: the new version FAILS, the stable one takes all traffic.

    \b
    Example:
      steady abort web
    """
    _send(name, "abort")


COMMANDS = (promote, pause, resume, abort)


_PHASES = {
    "RUNNING": "running",
    "WAITING": "waiting for steady promote",
    "PAUSED": "paused: steady resume",
    "COMPLETE": "complete, the old version drains",
    "ABORTED": "aborted",
}


def canary_lines(services: list[dict[str, Any]]) -> list[str]:
    """One line per service with a canary in flight, under ``steady status``'s table:
    its step, weight and phase, and the last analysis result."""
    lines = []
    for svc in services:
        canary = svc.get("canary")
        if not canary:
            continue
        update = svc.get("update") or {}
        phase = _PHASES.get(canary["phase"], canary["phase"].lower())
        if "pause_left_s" in canary and canary["phase"] == "RUNNING":
            phase = f"pausing, {canary['pause_left_s']:g}s left"
        line = (
            f"{svc['name']}: canary of version {update.get('to_version', '?')} at step "
            f"{canary['step']}/{canary['steps']}, weight {canary['weight']}% ({phase})"
        )
        analysis = canary.get("analysis")
        if analysis:
            line += f"; last analysis {analysis['outcome']}: {analysis['reason']}"
        lines.append(line)
    return lines
