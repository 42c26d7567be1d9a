"""``steady controller start|stop|status``: the controller of this STEADY_HOME."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from steadyserve.cli.client import (
    CommandError,
    controller_alive,
    start_controller,
    stop_controller,
)
from steadyserve.cli.common import _echo_json, _home, console, json_option, reports_errors

F = TypeVar("F", bound=Callable[..., Any])

PIPED_WIDTH = 200
"""Width of tables written to a pipe or file (COLUMNS overrides): wide enough that
the usual table is one line per row, and a long cell folds instead of hiding."""
WAIT_POLL_S = 0.2


@click.group()
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
