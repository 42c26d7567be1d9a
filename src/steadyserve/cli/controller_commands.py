"""``steady controller start|stop|status|run|install-unit``: the controller of this STEADY_HOME."""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from steadyserve.cli.common import _echo_json, _home, console, json_option, reports_errors
from steadyserve.cli.service_unit import UNIT_NAME, unit_text
from steadyserve.client.connection import (
    CommandError,
    controller_alive,
    start_controller,
    stop_controller,
)

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


def backend_options(func: F) -> F:
    """--backend and --ray-address, for the commands that start a controller."""
    func = click.option(
        "--ray-address",
        default=None,
        help="The Ray cluster: auto, HOST:PORT or ray://HOST:PORT (also STEADY_RAY_ADDRESS).",
    )(func)
    return click.option(
        "--backend",
        type=click.Choice(["local", "ray"]),
        default=None,
        help="Where replicas run (default local; also STEADY_BACKEND).",
    )(func)


def _choose_backend(backend: str | None, ray_address: str | None) -> None:
    if ray_address is not None and (backend or os.environ.get("STEADY_BACKEND")) != "ray":
        raise CommandError("--ray-address needs --backend ray", 2)
    if backend is not None:
        os.environ["STEADY_BACKEND"] = backend
    if ray_address is not None:
        os.environ["STEADY_RAY_ADDRESS"] = ray_address


@controller.command("start")
@backend_options
@reports_errors
def controller_start(backend: str | None, ray_address: str | None) -> None:
    """Start the controller (if none runs) and print its pid and address.

    With --backend ray, replicas run as actors on an existing Ray cluster
    (docs/ray.md); the choice lasts until the controller stops.

    \b
    Example:
      steady controller start --backend ray --ray-address auto
    """
    _choose_backend(backend, ray_address)
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


@controller.command("run")
@backend_options
@reports_errors
def controller_run(backend: str | None, ray_address: str | None) -> None:
    """Run the controller in the foreground, for systemd or another supervisor.

    It logs to stderr, brings every service back to its spec, and stops on
    SIGTERM or Ctrl-C leaving replicas serving for its next start. Exit 1 with
    one line when another controller holds this home.

    \b
    Example:
      STEADY_HOME=/srv/steady steady controller run
    """
    from steadyserve.controller.entry import main as run_daemon

    _choose_backend(backend, ray_address)
    sys.exit(run_daemon(["--home", str(_home().root)]))


@controller.command("install-unit")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Write the unit here (e.g. /etc/systemd/system/{UNIT_NAME}); default stdout.",
)
@click.option("--user", "user", default=None, help="Who runs the controller (default: you).")
@reports_errors
def controller_install_unit(output: Path | None, user: str | None) -> None:
    """Write a systemd unit that runs this home's controller (steady controller run).

    Restart=always brings the controller back when it dies and at boot; it
    brings every service back. The unit holds no secret (the API's secret is
    derived from the home).

    \b
    Example:
      steady controller install-unit --output /etc/systemd/system/steady-controller.service
    """
    text = unit_text(user or getpass.getuser(), _home().root)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"--output: cannot write {output}: {exc.strerror}", 2) from None
    console.print(
        f"wrote {output}; then: systemctl daemon-reload && systemctl enable --now {output.name}",
        markup=False,
        highlight=False,
    )
