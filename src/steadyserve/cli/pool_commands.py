"""``steady jobs pool``: SkyPilot's ``sky jobs pool apply|status|logs|down``.

A pool is made, listed and taken down as a service is (the services' routes);
its size alone changes through the pools' own route (controller/pool_api.py).
Each command is a function of this module; the helpers they share come first.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from steadyserve.cli.common import (
    _echo_json,
    _home,
    _print_notes,
    _print_table,
    console,
    controller_log_option,
    env_option,
    follow_option,
    ignore_image_option,
    ignore_resources_option,
    json_option,
    reports_errors,
    secret_option,
    tail_option,
)
from steadyserve.cli.logs import ShowOptions
from steadyserve.cli.pool_tables import policy_line, pools_table, workers_table
from steadyserve.cli.records import logs as service_logs
from steadyserve.cli.records import print_log
from steadyserve.client.connection import Client, CommandError
from steadyserve.client.service_files import load_one
from steadyserve.compat.file_mounts import staged

yes_prompt_option = click.option("-y", "--yes", is_flag=True, help="Skip the confirmation prompt.")


def services(client: Client) -> list[dict[str, Any]]:
    return list(client.call("GET", "/api/v1/services")["services"])


def pools_named(client: Client, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The pools named (every pool when none is), one line exit 2 for a name that is none."""
    found = {s["name"]: s for s in services(client)}
    for name in names:
        if name not in found:
            raise CommandError(f"unknown pool: {name}", 2)
        if found[name].get("pool") is None:
            raise CommandError(f"{name} is a service, not a pool (steady status shows it)", 2)
    chosen = [found[n] for n in names] if names else list(found.values())
    return [s for s in chosen if s.get("pool") is not None]


def confirm(question: str, yes: bool) -> None:
    """SkyPilot's prompt (``[Y/n]``, Enter proceeds): skipped with -y. Like
    SkyPilot's (click's), it reads a piped answer too
    (``yes | steady jobs cancel 3``); with no answer to read and no -y, refused in one line, nothing
    changed (where SkyPilot prints ``Aborted!``)."""
    if yes:
        return
    if sys.stdin.isatty():
        click.confirm(question, default=True, abort=True, err=True)
        return
    for line in sys.stdin:
        answer = line.strip().lower()
        click.echo(f"{question} [Y/n]: {line.strip()}", err=True)
        if answer in ("", "y", "yes"):
            return
        if answer in ("n", "no"):
            raise click.Abort
        click.echo("Error: invalid input", err=True)
    asked = question.removesuffix(". Proceed?")
    raise CommandError(f"{asked}: pass -y to confirm (no terminal to ask on)", 2)


@click.group("pool")
def pool() -> None:
    """A pool of workers that each ran setup: apply, status, logs, down.

    \b
    Example:
      steady jobs pool apply -p gpu-pool pool.yaml
    """


def _resize(client: Client, name: str, workers: int, mode: str | None, as_json: bool) -> None:
    pools_named(client, (name,))
    if not as_json:
        console.print(f"Attempting to update {name} to have {workers} workers", markup=False)
    request = {"workers": workers, **({"mode": mode} if mode else {})}
    result = client.call("POST", f"/api/v1/pools/{name}/workers", request)
    if as_json:
        _echo_json(
            {"name": name, "action": "resize", "version": result["version"], **_changed(result)}
        )
        return
    console.print(_updated(name, result), markup=False)


def _updated(name: str, result: dict[str, Any]) -> str:
    """SkyPilot's finishing line of an update, which its users' scripts grep for."""
    if result["changed"]:
        return f"Successfully updated pool {name!r} to version {result['version']}."
    return f"Successfully updated pool {name!r}: no change, version {result['version']} stays."


def _changed(result: dict[str, Any]) -> dict[str, bool]:
    return {"changed": bool(result["changed"])}


@pool.command("apply")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-p",
    "--pool",
    "name",
    default=None,
    help="The pool's name (with FILE, default: the file's name:, else its stem).",
)
@click.option(
    "--workers",
    type=click.IntRange(0, 1000),
    default=None,
    help="Resize the running pool to N workers (no FILE).",
)
@click.option(
    "--mode",
    type=click.Choice(["rolling", "blue_green"]),
    default=None,
    help="How an update of a running pool replaces its workers (default rolling).",
)
@click.option("-y", "--yes", is_flag=True, help="Accepted (SkyPilot's; apply does not ask).")
@ignore_resources_option
@ignore_image_option
@env_option
@secret_option
@json_option
@reports_errors
def pool_apply(
    file: Path | None,
    name: str | None,
    workers: int | None,
    mode: str | None,
    yes: bool,
    ignore_resources: bool,
    ignore_image: bool,
    envs: tuple[str, ...],
    secrets: tuple[str, ...],
    as_json: bool,
) -> None:
    """sky jobs pool apply -p NAME FILE: make the pool, or update it to FILE;
    sky jobs pool apply -p NAME --workers N: resize it.

    A size change keeps the workers; a change of setup, workdir or envs
    replaces them as each finishes its job.

    \b
    Example:
      steady jobs pool apply -p gpu-pool pool.yaml
      steady jobs pool apply -p gpu-pool --workers 5
    """
    if file is not None and workers is not None:
        raise CommandError(
            "Cannot specify both --workers and POOL_YAML. Please use one of them.", 2
        )
    if file is None and workers is None:
        raise CommandError("give a pool file, or --workers N to resize a running pool", 2)
    if file is None and name is None:  # SkyPilot's words
        raise CommandError("A pool name must be provided to update the number of workers.", 2)
    client = Client(_home())
    if file is None:
        assert workers is not None and name is not None
        _resize(client, name, workers, mode, as_json)
        return
    notes: list[str] = []
    spec = load_one(file, name, notes, ignore_resources, ignore_image, envs, secrets)
    name = str(spec.name)
    if spec.service.pool is None:
        raise CommandError(f"{file}: pool: a pool file needs a pool: section (workers: N)", 2)
    known = {s["name"]: s for s in services(client)}
    if mode is not None and name not in known:
        notes.append(f"--mode {mode}: does not apply to a new pool (it has no workers to replace)")
    _print_notes(notes)
    body: dict[str, Any] = {"yaml": file.read_text(encoding="utf-8"), "file": str(file.resolve())}
    with staged(spec, file) as sent:  # file_mounts copied into the workdir
        body["spec"] = sent.spec_json()
        if name in known:
            result = client.call("POST", f"/api/v1/services/{name}/update", {**body, "mode": mode})
            out = {"action": "update", "version": result["version"], **_changed(result)}
            line = _updated(name, result)
        else:
            client.call("POST", "/api/v1/services", body)
            out = {"action": "create", "version": 1, "changed": True}
            line = f"Successfully created pool {name!r}: its workers run setup, then take jobs."
    if as_json:
        _echo_json({"name": name, **out})
        return
    policy = spec.service.pool.model_dump(mode="json")
    console.print(f"Pool name: {name}", markup=False)
    console.print(f"Worker policy: {policy_line(policy)}", markup=False)
    console.print(
        f"Submit jobs: steady jobs launch --pool {name} JOB.yaml\n"
        f"Status:      steady jobs pool status {name}\n"
        f"Take down:   steady jobs pool down {name} -y",
        markup=False,
    )
    console.print(line, markup=False)  # last, as SkyPilot's finishing line


@pool.command("status")
@click.argument("names", nargs=-1)
@json_option
@reports_errors
def pool_status(names: tuple[str, ...], as_json: bool) -> None:
    """sky jobs pool status [NAMES]: the pools, then their workers and jobs.

    \b
    Example:
      steady jobs pool status gpu-pool
    """
    pools = pools_named(Client(_home()), names)
    if as_json:
        _echo_json({"pools": pools})
        return
    console.print("Pools", style="bold")
    _print_table(pools_table(pools))
    console.print()
    console.print("Pool Workers", style="bold")
    _print_table(workers_table(pools))


@pool.command("down")
@click.argument("names", nargs=-1)
@click.option("-a", "--all", "all_", is_flag=True, help="Every pool (services stay).")
@click.option(
    "-p", "--purge", is_flag=True, help="Accepted (SkyPilot's): a failed pool goes down anyway."
)
@yes_prompt_option
@json_option
@reports_errors
def pool_down(names: tuple[str, ...], all_: bool, purge: bool, yes: bool, as_json: bool) -> None:
    """sky jobs pool down NAME (or --all): cancel their jobs, stop their workers.

    Asks first, as SkyPilot does (-y skips the question; an answer piped in
    is read; with none to read, -y is needed).

    \b
    Example:
      steady jobs pool down gpu-pool -y
    """
    if bool(names) == all_:  # SkyPilot's words
        given = (f"POOL_NAMES={','.join(names)}" if names else "") + (" --all" if all_ else "")
        raise CommandError(f"Can only specify one of POOL_NAMES or --all. Provided {given!r}.", 2)
    if purge and not as_json:
        _print_notes(
            [
                "--purge: a pool in a failed state goes down without it here;"
                " its history is kept (steady down NAME --purge forgets it)"
            ]
        )
    client = Client(_home())
    chosen = [p["name"] for p in pools_named(client, names)]  # pools only: services stay
    if not chosen:
        if as_json:
            _echo_json({"down": [], "purged": False})
        else:
            console.print("No pool to take down.", markup=False)
        return
    confirm(f"Terminating pool(s) {', '.join(chosen)}. Proceed?", yes)
    for name in chosen:
        client.call("DELETE", f"/api/v1/services/{name}?purge=0", timeout=600.0)
        if not as_json:
            console.print(f"Pool {name} is down.", markup=False)
    if as_json:
        _echo_json({"down": chosen, "purged": False})


WORKER_LOG_POLL_S = 0.2


def _wait_for_worker_log(
    client: Client, found: dict[str, Any], worker_id: int, follow: bool
) -> None:
    """A worker's log exists once its process started (its setup runs in it);
    before that it is being given its environment: followed, wait for the log."""
    name = found["name"]
    log = _home().replica_log(name, worker_id)
    while not log.exists():
        workers = {w["id"]: w for w in found["replicas"]}
        if worker_id not in workers:
            raise CommandError(f"unknown worker {worker_id} of pool {name}", 2)
        status = workers[worker_id]["status"]
        if status.startswith("FAILED") or status in ("PREEMPTED", "SHUTTING_DOWN"):
            why = workers[worker_id].get("reason") or status  # it never started a process
            raise CommandError(f"worker {worker_id} of {name} has no log: {why}", 1)
        if not follow:
            raise CommandError(
                f"worker {worker_id} of {name} has no output yet ({status}: its"
                " environment is being prepared)",
                1,
            )
        time.sleep(WORKER_LOG_POLL_S)
        (found,) = pools_named(client, (name,))


@pool.command("logs")
@click.argument("name")
@click.argument("worker_id", required=False, type=int)
@controller_log_option
@follow_option
@tail_option
@json_option
@click.pass_context
@reports_errors
def pool_logs(
    ctx: click.Context,
    name: str,
    worker_id: int | None,
    controller_log: bool,
    follow: bool,
    tail: int | None,
    as_json: bool,
) -> None:
    """sky jobs pool logs NAME [WORKER_ID]: a worker's log (its setup's output, as it
    runs and after it failed; followed, until its setup ended), or the
    controller's with --controller.

    \b
    Example:
      steady jobs pool logs gpu-pool 1 --no-follow
    """
    client = Client(_home())
    (found,) = pools_named(client, (name,))
    if worker_id is None and not controller_log:
        raise CommandError("Specify a target to tail: --controller, or a WORKER_ID.", 2)
    if worker_id is not None and controller_log:
        raise CommandError(
            "Can only tail logs from one target at a time (the controller, or a worker).", 2
        )
    if worker_id is None:
        ctx.invoke(
            service_logs,
            name=name,
            replica_id=None,
            controller_log=True,
            lb_log=False,
            access_log=False,
            follow=follow,
            tail=tail,
            timestamps=False,
            utc=False,
            as_json=as_json,
        )
        return
    _wait_for_worker_log(client, found, worker_id, follow)
    show = ShowOptions(tail, follow, as_json=as_json)
    path = _home().replica_log(name, worker_id)
    print_log(path, name, access_log=False, show=show, until=SetupEnded(client, name, worker_id))


class SetupEnded:
    """Whether a worker's setup has ended (it is READY, or it failed or went):
    SkyPilot's ``sky jobs pool logs POOL ID`` follows the setup and returns when
    it ends; what a worker logs after that is its own, never a job's output.
    Asks the controller at most once every ``ASK_EVERY_S``."""

    ASK_EVERY_S = 1.0

    def __init__(self, client: Client, name: str, worker_id: int) -> None:
        self.client, self.name, self.worker_id = client, name, worker_id
        self.asked_at = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.asked_at < self.ASK_EVERY_S:
            return False
        self.asked_at = now
        (found,) = pools_named(self.client, (self.name,))
        workers = {w["id"]: w["status"] for w in found["replicas"]}
        return workers.get(self.worker_id) not in ("PENDING", "PROVISIONING", "STARTING")
