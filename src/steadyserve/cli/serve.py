"""``steady serve``: SkyServe's CLI spelled as ``sky serve``, so a script around
``sky serve up -n NAME FILE`` runs with ``sky`` replaced by ``steady``.

Each command takes SkyServe's arguments and flags and runs the ``steady``
command that does the same (docs/skyserve.md has the mapping); the output is
that command's, whose tables already have SkyServe's layout (Services, then
Service Replicas). Flags with no meaning here (``-y`` where nothing asks,
``--all-users``) are accepted so scripts keep working. Also here: the plan
``steady up --dry-run`` prints, and ``status --endpoint``'s one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from steadyserve.cli.common import (
    controller_log_option,
    env_option,
    follow_option,
    ignore_image_option,
    ignore_resources_option,
    reports_errors,
    secret_option,
    tail_option,
)
from steadyserve.client.connection import Client, CommandError
from steadyserve.spec import ServiceSpec


def up_plan(spec: ServiceSpec) -> dict[str, Any]:
    """What ``steady up`` would create, from the file alone (no controller asked)."""
    scheme = "https" if spec.service.tls else "http"
    port = spec.service.port
    return {
        "name": spec.name,
        "action": "create",
        "dry_run": True,
        "kind": spec.replica_kind,
        "replicas": spec.service.target_replicas,
        "endpoint": f"{scheme}://127.0.0.1:{port}" if port is not None else None,
        "workdir": spec.workdir,
    }


def plan_line(plan: dict[str, Any]) -> str:
    where = plan["endpoint"] or "the next free port from 30001"
    count = plan["replicas"]
    return (
        f"{plan['name']}: would be created with {count} {plan['kind']}"
        f" replica{'' if count == 1 else 's'}, at {where}; nothing started"
    )


def endpoint_url(client: Client, names: tuple[str, ...]) -> str:
    """SkyServe's ``status --endpoint NAME``: ``http://HOST:PORT`` (``https`` with TLS)."""
    if len(names) != 1:
        raise CommandError("--endpoint takes exactly one service name", 2)
    (name,) = names
    found = client.call("GET", f"/api/v1/services?name={name}")["services"]
    if not found:
        raise CommandError(f"unknown service: {name}", 2)
    return f"{found[0].get('scheme', 'http')}://{found[0]['endpoint']}"


yes_accepted = click.option("-y", "--yes", is_flag=True, help="Accepted (SkyServe's; no prompt).")


def serve_group(
    up: click.Command,
    status: click.Command,
    update: click.Command,
    logs: click.Command,
    down: click.Command,
) -> click.Group:
    """The ``serve`` group, each command running the given ``steady`` command."""

    @click.group("serve")
    def serve() -> None:
        """SkyServe's CLI: sky serve up/status/update/logs/down (docs/skyserve.md).

        \b
        Example:
          steady serve up -n http-server service.yaml
          steady serve status --endpoint http-server
        """

    @serve.command("up")
    @click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("-n", "--service-name", "name", help="Service name (default: as steady up).")
    @yes_accepted
    @ignore_resources_option
    @ignore_image_option
    @env_option
    @secret_option
    @click.pass_context
    @reports_errors
    def serve_up(
        ctx: click.Context,
        file: Path,
        name: str | None,
        yes: bool,
        ignore_resources: bool,
        ignore_image: bool,
        envs: tuple[str, ...],
        secrets: tuple[str, ...],
    ) -> None:
        """sky serve up -n NAME FILE: start a service (steady up).

        \b
        Example:
          steady serve up -n http-server examples/serve/http_server/task.yaml
        """
        ctx.invoke(
            up,
            file=file,
            name=name,
            ignore_resources=ignore_resources,
            ignore_image=ignore_image,
            envs=envs,
            secrets=secrets,
        )

    @serve.command("status")
    @click.argument("names", nargs=-1)
    @click.option("-v", "--verbose", is_flag=True, help="Add the policy columns.")
    @click.option("--endpoint", is_flag=True, help="Print only NAME's endpoint URL (one line).")
    @click.option("-u", "--all-users", is_flag=True, help="Accepted (one user here).")
    @click.pass_context
    @reports_errors
    def serve_status(
        ctx: click.Context, names: tuple[str, ...], verbose: bool, endpoint: bool, all_users: bool
    ) -> None:
        """sky serve status [--endpoint] [NAMES]: services and replicas (steady status).

        \b
        Example:
          steady serve status --endpoint http-server
        """
        ctx.invoke(status, names=names, verbose=verbose, endpoint=endpoint)

    @serve.command("update")
    @click.argument("name")
    @click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option(
        "--mode",
        type=click.Choice(["rolling", "blue_green"]),
        default=None,
        help="How replicas restart (default: the file's service.update_mode, else rolling).",
    )
    @yes_accepted
    @ignore_resources_option
    @ignore_image_option
    @env_option
    @secret_option
    @click.pass_context
    @reports_errors
    def serve_update(
        ctx: click.Context,
        name: str,
        file: Path,
        mode: str | None,
        yes: bool,
        ignore_resources: bool,
        ignore_image: bool,
        envs: tuple[str, ...],
        secrets: tuple[str, ...],
    ) -> None:
        """sky serve update NAME FILE --mode blue_green -y: a new version (steady update).

        \b
        Example:
          steady serve update http-server new.yaml --mode blue_green -y
        """
        ctx.invoke(
            update,
            name=name,
            file=file,
            mode=mode,
            ignore_resources=ignore_resources,
            ignore_image=ignore_image,
            envs=envs,
            secrets=secrets,
        )

    @serve.command("logs")
    @click.argument("name")
    @click.argument("replica_id", required=False, type=int)
    @controller_log_option
    @click.option("--load-balancer", "lb_log", is_flag=True, help="The load balancer's log.")
    @follow_option
    @tail_option
    @click.pass_context
    @reports_errors
    def serve_logs(
        ctx: click.Context,
        name: str,
        replica_id: int | None,
        controller_log: bool,
        lb_log: bool,
        follow: bool,
        tail: int | None,
    ) -> None:
        """sky serve logs NAME [ID]: a replica's log, followed as SkyServe does (steady logs).

        \b
        Example:
          steady serve logs http-server 1 --no-follow
        """
        ctx.invoke(
            logs,
            name=name,
            replica_id=replica_id,
            controller_log=controller_log,
            lb_log=lb_log,
            follow=follow,
            tail=tail,
        )

    @serve.command("down")
    @click.argument("names", nargs=-1)
    @click.option("-a", "--all", "all_", is_flag=True, help="Take down every service.")
    @click.option("-p", "--purge", is_flag=True, help="Also forget versions, events and logs.")
    @click.option("-y", "--yes", is_flag=True, help="Do not ask before taking down.")
    @click.pass_context
    @reports_errors
    def serve_down(
        ctx: click.Context, names: tuple[str, ...], all_: bool, purge: bool, yes: bool
    ) -> None:
        """sky serve down NAME -y (or --all): stop services (steady down).

        \b
        Example:
          steady serve down http-server -y
        """
        ctx.invoke(down, names=names, all_=all_, purge=purge, yes=yes)

    return serve
