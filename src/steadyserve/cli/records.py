"""``steady history`` and ``steady logs``: what happened to a service, also
after it was taken down."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from steadyserve.cli import logs as logs_mod
from steadyserve.cli.common import (
    _echo_json,
    _home,
    _print_table,
    console,
    json_option,
    reports_errors,
    tail_option,
    utc_option,
)
from steadyserve.cli.tables import (
    Clock,
    history_table,
)
from steadyserve.client.connection import (
    Client,
    CommandError,
)
from steadyserve.compat.skyserve import MaskedOutput, secret_values

F = TypeVar("F", bound=Callable[..., Any])

PIPED_WIDTH = 200
"""Width of tables written to a pipe or file (COLUMNS overrides): wide enough that
the usual table is one line per row, and a long cell folds instead of hiding."""
WAIT_POLL_S = 0.2


@click.command()
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


@click.command()
@click.argument("name")
@click.argument("replica_id", required=False, type=int)
@click.option("--controller", "controller_log", is_flag=True, help="The controller's log.")
@click.option("--load-balancer", "lb_log", is_flag=True, help="The service's load balancer log.")
@click.option(
    "--access",
    "access_log",
    is_flag=True,
    help="The service's request log: who called, what, how it went (service.access_log).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines.")
@tail_option
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
    access_log: bool,
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
    --access prints the service's request log (service.access_log: true), one
    line a request: time, client, method, path, status, latency, version/replica
    (lb:REASON when the load balancer answered), request id, user agent; with
    --json, the log's own JSON lines.

    \b
    Example:
      steady logs http-server 2 --tail 20 --follow --timestamps
      steady logs http-server --access --follow
    """
    home = _home()
    if controller_log + lb_log + access_log > 1:
        raise CommandError("--controller, --load-balancer and --access are exclusive", 2)
    if controller_log:
        path = home.controller_log
    else:
        if not home.service_dir(name).is_dir():
            raise CommandError(f"unknown service: {name}", 2)
        if lb_log:
            path = home.lb_log(name)
        elif access_log:
            path = home.service_dir(name) / "access.log"
            if not path.exists():
                raise CommandError(
                    f"{name} has no request log yet (service.access_log: true turns it on)", 2
                )
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
    print_log(
        path,
        name=None if controller_log else name,
        access_log=access_log,
        show=logs_mod.ShowOptions(tail, follow, timestamps, as_json, utc),
    )


def print_log(
    path: Path,
    name: str | None,
    access_log: bool,
    show: logs_mod.ShowOptions,
    until: Callable[[], bool] | None = None,
) -> None:
    """Print one log as ``show`` says, the secrets of service ``name`` masked
    (None: the controller's log, which holds none); ``until`` ends following."""
    out: Any = sys.stdout.buffer
    if name is not None:  # secrets values never shown
        out = MaskedOutput(out, secret_values(_home().db_path, name))
    kind = logs_mod.AccessWriter if access_log else logs_mod.LineWriter
    writer = kind(
        out, str(path), timestamps=show.timestamps, as_json=show.as_json, clock=Clock(utc=show.utc)
    )
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        logs_mod.show(path, show.tail, show.follow, writer=writer, until=until)
