"""``steady jobs``: SkyPilot's pools and their jobs, spelled as ``sky jobs``.

``sky jobs pool apply -p NAME pool.yaml`` makes or updates a pool (its workers
run ``setup`` once), ``sky jobs launch --pool NAME job.yaml`` queues a job on it,
then ``queue``, ``logs``, ``cancel``, ``pool status`` and ``pool down``; a script
around them runs with ``sky`` replaced by ``steady`` (docs/pools.md has the
mapping). A pool is made and taken down as a service is (the services' routes,
``steady down``); its jobs go through the pools' own routes (controller/pool_api.py).
"""

from __future__ import annotations

import os
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
from steadyserve.cli.pool_tables import policy_line, pools_table, queue_table, workers_table
from steadyserve.client.connection import Client, CommandError
from steadyserve.client.python_defaults import raw_document
from steadyserve.client.service_files import load_one
from steadyserve.compat.file_mounts import staged
from steadyserve.compat.sky_jobs import parse_job
from steadyserve.spec import SpecError
from steadyserve.spec.variables import cli_values

FOLLOW_POLL_S = 0.2
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
JOB_RANK = "SKYPILOT_JOB_RANK"
NUM_JOBS = "SKYPILOT_NUM_JOBS"
"""SkyPilot's ``--num-jobs``: each job's rank and the count, to split the work."""

yes_accepted = click.option("-y", "--yes", is_flag=True, help="Accepted (SkyPilot's; no prompt).")


def _services(client: Client) -> list[dict[str, Any]]:
    return list(client.call("GET", "/api/v1/services")["services"])


def _pools(client: Client, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The pools named (every pool when none is), one line exit 2 for a name that is none."""
    found = {s["name"]: s for s in _services(client)}
    for name in names:
        if name not in found:
            raise CommandError(f"unknown pool: {name}", 2)
        if found[name].get("pool") is None:
            raise CommandError(f"{name} is a service, not a pool (steady status shows it)", 2)
    chosen = [found[n] for n in names] if names else list(found.values())
    return [s for s in chosen if s.get("pool") is not None]


def _follow(client: Client, job_id: int, follow: bool) -> dict[str, Any]:
    """Print the job's log; with ``follow``, until the job ends. Its last record."""
    offset = 0
    while True:
        job = client.call("GET", f"/api/v1/jobs/{job_id}")
        try:
            with open(job["log"], "rb") as log:
                log.seek(offset)
                chunk = log.read()
        except FileNotFoundError:
            chunk = b""
        if chunk:
            offset += len(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        if not follow or job["status"] in ENDED:
            return dict(job)
        time.sleep(FOLLOW_POLL_S)


def jobs_group(down: click.Command, service_logs: click.Command) -> click.Group:
    """The ``jobs`` group; ``pool down`` and ``pool logs`` run the given ``steady down``
    and ``steady logs``."""

    @click.group("jobs")
    def jobs() -> None:
        """SkyPilot's pools and jobs: sky jobs pool apply/status/down, launch, queue,
        logs, cancel (docs/pools.md).

        \b
        Example:
          steady jobs pool apply -p gpu-pool pool.yaml
          steady jobs launch --pool gpu-pool job.yaml
        """

    @jobs.group("pool")
    def pool() -> None:
        """A pool of workers that ran setup once: apply, status, logs, down.

        \b
        Example:
          steady jobs pool apply -p gpu-pool pool.yaml
        """

    @pool.command("apply")
    @click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
    @click.option("-p", "--pool", "name", required=True, help="The pool's name.")
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
    @yes_accepted
    @ignore_resources_option
    @ignore_image_option
    @env_option
    @secret_option
    @reports_errors
    def pool_apply(
        file: Path | None,
        name: str,
        workers: int | None,
        mode: str | None,
        yes: bool,
        ignore_resources: bool,
        ignore_image: bool,
        envs: tuple[str, ...],
        secrets: tuple[str, ...],
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
        client = Client(_home())
        if file is None:
            _pools(client, (name,))
            console.print(f"Attempting to update {name} to have {workers} workers", markup=False)
            request = {"workers": workers, **({"mode": mode} if mode else {})}
            result = client.call("POST", f"/api/v1/pools/{name}/workers", request)
            said = f"version {result['version']}" if result["changed"] else "unchanged"
            console.print(f"Pool {name} updated: {said}.", markup=False)
            return
        notes: list[str] = []
        spec = load_one(file, name, notes, ignore_resources, ignore_image, envs, secrets)
        if spec.service.pool is None:
            raise CommandError(f"{file}: pool: a pool file needs a pool: section (workers: N)", 2)
        known = {s["name"]: s for s in _services(client)}
        if mode is not None and name not in known:
            notes.append(
                f"--mode {mode}: does not apply to a new pool (it has no workers to replace)"
            )
        _print_notes(notes)
        body: dict[str, Any] = {
            "yaml": file.read_text(encoding="utf-8"),
            "file": str(file.resolve()),
        }
        with staged(spec, file) as sent:  # file_mounts copied into the workdir
            body["spec"] = sent.spec_json()
            if name in known:
                result = client.call(
                    "POST", f"/api/v1/services/{name}/update", {**body, "mode": mode}
                )
                said = f"version {result['version']}" if result["changed"] else "unchanged"
                console.print(f"Pool {name} updated: {said}.", markup=False)
            else:
                client.call("POST", "/api/v1/services", body)
                console.print(f"Pool {name} is starting.", markup=False)
        policy = spec.service.pool.model_dump(mode="json")
        console.print(f"Worker policy: {policy_line(policy)}", markup=False)
        console.print(
            f"Submit jobs: steady jobs launch --pool {name} JOB.yaml\n"
            f"Status:      steady jobs pool status {name}\n"
            f"Take down:   steady jobs pool down {name} -y",
            markup=False,
        )

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
        pools = _pools(Client(_home()), names)
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
    @click.option("-y", "--yes", is_flag=True, help="Accepted (SkyPilot's; no prompt).")
    @click.pass_context
    @reports_errors
    def pool_down(
        ctx: click.Context, names: tuple[str, ...], all_: bool, purge: bool, yes: bool
    ) -> None:
        """sky jobs pool down NAME -y (or --all): cancel their jobs, stop their workers
        (steady down).

        \b
        Example:
          steady jobs pool down gpu-pool -y
        """
        if bool(names) == all_:  # SkyPilot's words
            given = (f"POOL_NAMES={','.join(names)}" if names else "") + (" --all" if all_ else "")
            raise CommandError(
                f"Can only specify one of POOL_NAMES or --all. Provided {given!r}.", 2
            )
        if purge:
            _print_notes(
                [
                    "--purge: a pool in a failed state goes down without it here;"
                    " its history is kept (steady down NAME --purge forgets it)"
                ]
            )
        pools = _pools(Client(_home()), names)  # pools only: steady down takes services
        chosen = names or tuple(p["name"] for p in pools)
        if not chosen:
            console.print("No pool to take down.", markup=False)
            return
        ctx.invoke(down, names=chosen, all_=False, purge=False, yes=True, as_json=False)

    @pool.command("logs")
    @click.argument("name")
    @click.argument("worker_id", required=False, type=int)
    @controller_log_option
    @follow_option
    @tail_option
    @click.pass_context
    @reports_errors
    def pool_logs(
        ctx: click.Context,
        name: str,
        worker_id: int | None,
        controller_log: bool,
        follow: bool,
        tail: int | None,
    ) -> None:
        """sky jobs pool logs NAME [WORKER_ID]: a worker's log (its setup), or the
        controller's with --controller (steady logs).

        \b
        Example:
          steady jobs pool logs gpu-pool 1 --no-follow
        """
        _pools(Client(_home()), (name,))
        if worker_id is None and not controller_log:
            raise CommandError("Specify a target to tail: --controller, or a WORKER_ID.", 2)
        if worker_id is not None and controller_log:
            raise CommandError(
                "Can only tail logs from one target at a time (the controller, or a worker).", 2
            )
        ctx.invoke(
            service_logs,
            name=name,
            replica_id=worker_id,
            controller_log=controller_log,
            lb_log=False,
            follow=follow,
            tail=tail,
        )

    @jobs.command("launch")
    @click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("-p", "--pool", "pool_name", required=True, help="The pool to run on.")
    @click.option("-n", "--name", help="The job's name (default: the file's name:, else its stem).")
    @click.option("--num-jobs", type=click.IntRange(1, 1000), default=1, help="Submit N jobs.")
    @click.option("-d", "--detach-run", is_flag=True, help="Submit and return; do not follow.")
    @yes_accepted
    @env_option
    @secret_option
    @reports_errors
    def launch(
        file: Path,
        pool_name: str,
        name: str | None,
        num_jobs: int,
        detach_run: bool,
        yes: bool,
        envs: tuple[str, ...],
        secrets: tuple[str, ...],
    ) -> None:
        """sky jobs launch --pool NAME FILE: queue FILE's run on the pool.

        It runs on the first idle worker, in that worker's environment; without
        -d its log is followed until it ends (exit 1 unless it SUCCEEDED).

        \b
        Example:
          steady jobs launch --pool gpu-pool job.yaml -d
        """
        try:
            given = cli_values(envs, "--env", os.environ)
            given.update(cli_values(secrets, "--secret", os.environ))
            job_file = parse_job(raw_document(file), file.stem, given)
        except SpecError as exc:
            raise exc.in_file(str(file)) from None
        _print_notes(list(job_file.notes))
        client = Client(_home())
        _pools(client, (pool_name,))
        ids = []
        for rank in range(num_jobs):
            job_envs = dict(job_file.envs)
            if num_jobs > 1:
                job_envs.update({JOB_RANK: str(rank), NUM_JOBS: str(num_jobs)})
            body = {"name": name or job_file.name, "run": job_file.run, "envs": job_envs}
            ids.append(client.call("POST", f"/api/v1/pools/{pool_name}/jobs", body)["id"])
        if len(ids) == 1:
            console.print(f"Job submitted, ID: {ids[0]}", markup=False)
        else:
            console.print(f"Jobs submitted with IDs: {','.join(map(str, ids))}.", markup=False)
        if detach_run or len(ids) > 1:
            return
        job = _follow(client, ids[0], follow=True)
        console.print(f"Job {job['id']} finished (status: {job['status']}).", markup=False)
        if job["status"] != "SUCCEEDED":
            sys.exit(1)

    @jobs.command("queue")
    @click.option("-p", "--pool", "pool_name", help="Only this pool's jobs.")
    @json_option
    @reports_errors
    def queue(pool_name: str | None, as_json: bool) -> None:
        """sky jobs queue: every job, its pool, worker and status.

        \b
        Example:
          steady jobs queue
        """
        path = f"/api/v1/jobs?pool={pool_name}" if pool_name else "/api/v1/jobs"
        rows = Client(_home()).call("GET", path)["jobs"]
        if as_json:
            _echo_json({"jobs": rows})
            return
        console.print("Managed jobs", style="bold")
        _print_table(queue_table(rows))

    @jobs.command("logs")
    @click.argument("job_id", type=int)
    @click.option(
        "--follow/--no-follow", default=True, show_default=True, help="Until the job ends."
    )
    @reports_errors
    def logs(job_id: int, follow: bool) -> None:
        """sky jobs logs ID: the job's output, followed until it ends.

        \b
        Example:
          steady jobs logs 3 --no-follow
        """
        _follow(Client(_home()), job_id, follow)

    @jobs.command("cancel")
    @click.argument("job_ids", nargs=-1, type=int)
    @click.option("-p", "--pool", "pool_name", help="Cancel every job of this pool not ended.")
    @click.option("-y", "--yes", is_flag=True, help="Accepted (SkyPilot's; no prompt).")
    @reports_errors
    def cancel(job_ids: tuple[int, ...], pool_name: str | None, yes: bool) -> None:
        """sky jobs cancel ID... -y (or -p POOL): stop jobs, pending or running.

        \b
        Example:
          steady jobs cancel 3 -y
        """
        if bool(job_ids) == bool(pool_name):
            raise CommandError("name jobs to cancel, or pass --pool (not both)", 2)
        client = Client(_home())
        if pool_name:
            _pools(client, (pool_name,))
            rows = client.call("GET", f"/api/v1/jobs?pool={pool_name}")["jobs"]
            job_ids = tuple(r["id"] for r in rows if r["status"] not in ENDED)
        for job_id in job_ids:
            result = client.call("POST", f"/api/v1/jobs/{job_id}/cancel")
            console.print(result["message"], markup=False)

    return jobs
