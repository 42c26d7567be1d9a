"""``steady controller start|stop|status|run|restore|install-unit``: this home's controller."""

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
@json_option
@reports_errors
def controller_start(backend: str | None, ray_address: str | None, as_json: bool) -> None:
    """Start the controller (if none runs) and print its pid and address.

    With --backend ray, replicas run as actors on an existing Ray cluster
    (docs/ray.md); the choice lasts until the controller stops.

    \b
    Example:
      steady controller start --backend ray --ray-address auto
    """
    _choose_backend(backend, ray_address)
    info = start_controller(_home())
    if as_json:
        _echo_json({"running": True, **info})
        return
    console.print(f"controller running: pid {info['pid']} at {info['url']}")


@controller.command("stop")
@json_option
@reports_errors
def controller_stop(as_json: bool) -> None:
    """Stop the controller; services keep serving and are re-adopted on its next start.

    The gateway port (Ray Serve's HTTP port) is freed: it comes back with the
    next controller while an application is routed on it.

    \b
    Example:
      steady controller stop
    """
    stopped = stop_controller(_home())
    if as_json:
        _echo_json({"stopped": stopped})
    else:
        console.print("controller stopped" if stopped else "no controller running")


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
@json_option
@reports_errors
def controller_run(backend: str | None, ray_address: str | None, as_json: bool) -> None:
    """Run the controller in the foreground, for systemd or another supervisor.

    It logs to stderr, brings every service back to its spec, and stops on
    SIGTERM or Ctrl-C leaving replicas serving for its next start. Exit 1 with
    one line when another controller holds this home. With --json, its exit is
    one object on stdout ({"exit_code": N}); the log stays on stderr.

    \b
    Example:
      STEADY_HOME=/srv/steady steady controller run
    """
    from steadyserve.controller.entry import main as run_daemon

    _choose_backend(backend, ray_address)
    code = run_daemon(["--home", str(_home().root)])
    if as_json:
        _echo_json({"exit_code": code}, line=True)
    sys.exit(code)


@controller.command("restore")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--empty",
    is_flag=True,
    help="Begin with an empty state; processes still running are left alone, unmanaged.",
)
@json_option
@reports_errors
def controller_restore(file: Path | None, empty: bool, as_json: bool) -> None:
    """Replace this home's state.db while no controller runs: with FILE (a state.db
    copy you kept), the newest good backup (no FILE), or an empty state (--empty).
    The current state.db is kept as state.db.broken-TIME.

    A controller recovers an empty or damaged state.db from the backups by itself;
    this is for when it cannot (it names this command) or you want an older copy.

    \b
    Example:
      steady controller restore ~/.steady/backups/state.db.2
    """
    from steadyserve.controller import backups, recovery
    from steadyserve.controller.clock import SYSTEM_CLOCK

    home = _home()
    if file is not None and empty:
        raise CommandError("FILE and --empty: choose one", 2)
    if controller_alive(home):
        raise CommandError(f"a controller runs for {home.root}: stop it first", 2)
    source = file
    if file is None and not empty:
        source = backups.newest_good(home.ensure())
        if source is None:
            raise CommandError(f"no good backup in {backups.folder(home)}", 2)
    try:
        said = recovery.restore(home.ensure(), source, SYSTEM_CLOCK.wall())
    except recovery.StateRefused as exc:
        raise CommandError(str(exc), 2) from None
    if as_json:
        _echo_json({"restored": True, "source": str(source) if source else None, "message": said})
    else:
        console.print(said, markup=False)


@controller.command("install-unit")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Write the unit here (e.g. /etc/systemd/system/{UNIT_NAME}); default stdout.",
)
@click.option("--user", "user", default=None, help="Who runs the controller (default: you).")
@json_option
@reports_errors
def controller_install_unit(output: Path | None, user: str | None, as_json: bool) -> None:
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
        if as_json:
            _echo_json({"unit": text, "output": None})
        else:
            click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"--output: cannot write {output}: {exc.strerror}", 2) from None
    if as_json:
        _echo_json({"unit": text, "output": str(output)})
        return
    console.print(
        f"wrote {output}; then: systemctl daemon-reload && systemctl enable --now {output.name}",
        markup=False,
        highlight=False,
    )
