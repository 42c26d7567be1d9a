"""``steady promote|pause|resume|abort NAME``: steer the update in flight.

A canary takes all four (docs/canary.md); a rolling or blue-green update takes
``abort`` (roll back now). Anything else is refused with one line, exit 2.
"""

from __future__ import annotations

from typing import Any

import click

from steadyserve.cli.common import _echo_json, json_option, reports_errors
from steadyserve.client.connection import Client
from steadyserve.home.paths import Home


def _send(name: str, action: str, as_json: bool, body: dict[str, bool] | None = None) -> None:
    result = Client(Home.from_env()).call("POST", f"/api/v1/services/{name}/{action}", body or {})
    if as_json:
        _echo_json({"name": name, "action": action, "message": result["message"]})
    else:
        click.echo(f"{name}: {result['message']}")


@click.command()
@click.argument("name")
@click.option("--full", is_flag=True, help="Skip every remaining step: all traffic now.")
@json_option
@reports_errors
def promote(name: str, full: bool, as_json: bool) -> None:
    """Move the canary of NAME past its current pause (or to 100% with --full).

    \b
    Example:
      steady promote web --full
    """
    _send(name, "promote", as_json, {"full": full})


@click.command()
@click.argument("name")
@json_option
@reports_errors
def pause(name: str, as_json: bool) -> None:
    """Hold the canary of NAME at its current step until steady resume.

    \b
    Example:
      steady pause web
    """
    _send(name, "pause", as_json)


@click.command()
@click.argument("name")
@json_option
@reports_errors
def resume(name: str, as_json: bool) -> None:
    """Carry on with a paused canary of NAME (a timed pause starts again).

    \b
    Example:
      steady resume web
    """
    _send(name, "resume", as_json)


@click.command()
@click.argument("name")
@json_option
@reports_errors
def abort(name: str, as_json: bool) -> None:
    """Abort the update of NAME: the new version FAILS, the stable one takes all traffic.

    \b
    Example:
      steady abort web
    """
    _send(name, "abort", as_json)


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
        shadow = canary.get("shadow")
        if shadow:
            lines.extend(shadow_lines(svc["name"], shadow))
    return lines


def shadow_lines(name: str, shadow: dict[str, Any]) -> list[str]:
    """A shadow step's figures: what was mirrored and compared, the verdict, and the
    most frequent differing paths, each with one (masked) request that showed it."""
    lines = [
        f"{name}: shadow {shadow['mirror']}%: {shadow['mirrored']} mirrored, "
        f"{shadow['dropped']} dropped, {shadow['compared']} compared, "
        f"{shadow['differed']} differ ({shadow['rate']:.2%}); {shadow['outcome']}: "
        f"{shadow['reason']}"
    ]
    for top in shadow.get("top_paths") or ():
        lines.append(f"  {top['key']}: {top['answers']} answers, e.g. {top['example']}")
    if shadow.get("noise"):
        lines.append(f"  noise (ignored): {', '.join(shadow['noise'])}")
    return lines
