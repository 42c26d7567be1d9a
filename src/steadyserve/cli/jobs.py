"""``steady jobs``: SkyPilot's pools and their jobs, spelled as ``sky jobs``.

``sky jobs pool apply -p NAME pool.yaml`` makes or updates a pool (each worker
runs ``setup``; cli/pool_commands.py), ``sky jobs launch --pool NAME job.yaml``
queues a job on it, then ``queue``, ``logs`` and ``cancel``; a script around
them runs with ``sky`` replaced by ``steady`` (docs/pools.md has the mapping).
Jobs go through the pools' own routes (controller/pool_api.py). Each command
is a function of this module; the helpers they share come first.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click

from steadyserve.cli.common import (
    _echo_json,
    _home,
    _print_notes,
    _print_table,
    console,
    env_option,
    json_option,
    reports_errors,
    secret_option,
)
from steadyserve.cli.pool_commands import confirm, pool, pools_named, yes_prompt_option
from steadyserve.cli.pool_tables import queue_table
from steadyserve.client.connection import Client, CommandError
from steadyserve.client.python_defaults import raw_document
from steadyserve.compat.sky_jobs import JobFile, parse_job
from steadyserve.spec import SpecError
from steadyserve.spec.variables import cli_values

FOLLOW_POLL_S = 0.2
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
WAITING = frozenset({"PENDING", "RECOVERING"})
JOB_RANK = "SKYPILOT_JOB_RANK"
NUM_JOBS = "SKYPILOT_NUM_JOBS"
"""SkyPilot's ``--num-jobs``: each job's rank and the count, to split the work."""
SIGINT_EXIT = 130


# helpers -------------------------------------------------------------------
def _job_file(file: Path, envs: tuple[str, ...], secrets: tuple[str, ...]) -> JobFile:
    try:
        given = cli_values(envs, "--env", os.environ)
        given.update(cli_values(secrets, "--secret", os.environ))
        return parse_job(raw_document(file), file.stem, given)
    except SpecError as exc:
        raise exc.in_file(str(file)) from None


class _LogReader:
    """A job's log read from where the last read stopped: raw bytes, or (--json)
    one JSON object a whole line."""

    def __init__(self, job_id: int, as_json: bool) -> None:
        self.job_id, self.as_json = job_id, as_json
        self.offset, self.partial = 0, b""

    def read(self, path: str) -> None:
        try:
            with open(path, "rb") as log:
                log.seek(self.offset)
                chunk = log.read()
        except FileNotFoundError:
            return
        if not chunk:
            return
        self.offset += len(chunk)
        if not self.as_json:
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
            return
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for line in lines:
            self._emit(line)

    def flush(self) -> None:
        if self.as_json and self.partial:
            self._emit(self.partial)
            self.partial = b""

    def _emit(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace")
        item = {"source": f"job {self.job_id}", "time": None, "time_iso": None, "line": text}
        click.echo(json.dumps(item))


def _follow(client: Client, job_id: int, follow: bool, as_json: bool = False) -> dict[str, Any]:
    """Print the job's log; with ``follow``, until the job ends, saying (not with
    --json) while it waits for a worker. Its last record. Ctrl-C stops following,
    never the job, and says so."""
    reader = _LogReader(job_id, as_json)
    said: str | None = None
    try:
        while True:
            job = client.call("GET", f"/api/v1/jobs/{job_id}")
            reader.read(job["log"])
            if not follow or job["status"] in ENDED:
                reader.flush()
                return dict(job)
            if job["status"] in WAITING and not as_json and said != job["reason"]:
                said = job["reason"]
                click.echo(f"Job {job_id} is {job['status']} on pool {job['pool']}: {said}.")
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        click.echo(
            f"Job {job_id} keeps running: steady jobs logs {job_id} follows it again,"
            f" steady jobs cancel {job_id} -y stops it.",
            err=True,
        )
        sys.exit(SIGINT_EXIT)


def _launched(ids: list[int]) -> str:
    if len(ids) == 1:
        return f"Job submitted, ID: {ids[0]}"
    return f"Jobs submitted with IDs: {','.join(map(str, ids))}."


def _to_cancel(
    client: Client,
    job_ids: tuple[int, ...],
    pool_name: str | None,
    all_: bool,
    name: str | None,
) -> tuple[list[int], str]:
    """The jobs one of SkyPilot's four ways names (IDs, --pool, --all, --name),
    and the question asked before they are cancelled."""
    ways = sum((bool(job_ids), pool_name is not None, all_, name is not None))
    if ways != 1:
        raise CommandError("name the jobs to cancel: IDs, --pool, --all or --name (one of them)", 2)
    if job_ids:
        listed = ",".join(map(str, job_ids))
        which = f"job with ID {listed}" if len(job_ids) == 1 else f"jobs with IDs {listed}"
        return list(job_ids), f"Cancelling managed {which}. Proceed?"
    if pool_name is not None:
        pools_named(client, (pool_name,))
        rows = client.call("GET", f"/api/v1/jobs?pool={pool_name}")["jobs"]
        question = f"Cancelling managed jobs in pool {pool_name!r}. Proceed?"
    else:
        rows = client.call("GET", "/api/v1/jobs")["jobs"]
        if name is not None:
            rows = [r for r in rows if r["name"] == name]
            question = f"Cancelling managed job {name!r}. Proceed?"
        else:
            question = "Cancelling all managed jobs. Proceed?"
    return [r["id"] for r in rows if r["status"] not in ENDED], question


# commands ------------------------------------------------------------------
@click.group("jobs")
def jobs() -> None:
    """SkyPilot's pools and jobs: sky jobs pool apply/status/logs/down, launch,
    queue, logs, cancel (docs/pools.md).

    \b
    Example:
      steady jobs pool apply -p gpu-pool pool.yaml
      steady jobs launch --pool gpu-pool job.yaml
    """


jobs.add_command(pool)


@jobs.command("launch")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-p", "--pool", "pool_name", required=True, help="The pool to run on.")
@click.option("-n", "--name", help="The job's name (default: the file's name:, else its stem).")
@click.option("--num-jobs", type=click.IntRange(1, 1000), default=1, help="Submit N jobs.")
@click.option("-d", "--detach-run", is_flag=True, help="Submit and return; do not follow.")
@click.option("-y", "--yes", is_flag=True, help="Accepted (SkyPilot's; launch does not ask).")
@env_option
@secret_option
@json_option
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
    as_json: bool,
) -> None:
    """sky jobs launch --pool NAME FILE: queue FILE's run on the pool.

    It runs on the first idle worker, in that worker's environment; without
    -d (or --json, which prints the jobs submitted) its log is followed until
    it ends (exit 1 unless it SUCCEEDED). A failed pool refuses it, with why.

    \b
    Example:
      steady jobs launch --pool gpu-pool job.yaml -d
    """
    job_file = _job_file(file, envs, secrets)
    if not as_json:
        _print_notes(list(job_file.notes))
    client = Client(_home())
    pools_named(client, (pool_name,))
    submitted = []
    for rank in range(num_jobs):
        job_envs = {**job_file.envs, JOB_RANK: str(rank), NUM_JOBS: str(num_jobs)}
        body = {"name": name or job_file.name, "run": job_file.run, "envs": job_envs}
        if job_file.job_recovery is not None:
            body["job_recovery"] = job_file.job_recovery
        submitted.append(client.call("POST", f"/api/v1/pools/{pool_name}/jobs", body))
    if as_json:
        _echo_json({"jobs": submitted})
        return
    ids = [job["id"] for job in submitted]
    console.print(_launched(ids), markup=False)
    if detach_run or len(ids) > 1:
        return
    job = _follow(client, ids[0], follow=True)
    console.print(f"Job {job['id']} finished (status: {job['status']}).", markup=False)
    if job["status"] != "SUCCEEDED":
        sys.exit(1)


@jobs.command("queue")
@click.option("-p", "--pool", "pool_name", help="Only this pool's jobs.")
@click.option(
    "-s", "--skip-finished", is_flag=True, help="Only the jobs not ended (SkyPilot's -s)."
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    metavar="STATUS[,STATUS]",
    help="Only the jobs in these states, comma-separated (SkyPilot's -s FAILED,RUNNING).",
)
@json_option
@reports_errors
def queue(
    pool_name: str | None, skip_finished: bool, statuses: tuple[str, ...], as_json: bool
) -> None:
    """sky jobs queue: every job, its pool, worker, recoveries and status.

    \b
    Example:
      steady jobs queue -s
      steady jobs queue --status FAILED,CANCELLED
    """
    client = Client(_home())
    query = {"pool": pool_name} if pool_name else {}
    if skip_finished:
        query["skip_finished"] = "1"
    if statuses:
        query["status"] = ",".join(statuses)
    rows = client.call("GET", f"/api/v1/jobs?{urlencode(query)}")["jobs"]
    if pool_name and not rows:
        ever = client.call("GET", f"/api/v1/jobs?{urlencode({'pool': pool_name, 'limit': 1})}")
        if not ever["jobs"]:
            pools_named(client, (pool_name,))  # no job and no pool: one line, exit 2
    if as_json:
        _echo_json({"jobs": rows})
        return
    console.print("Managed jobs", style="bold")
    _print_table(queue_table(rows))


@jobs.command("logs")
@click.argument("job_id", type=int)
@click.option("--follow/--no-follow", default=True, show_default=True, help="Until the job ends.")
@json_option
@reports_errors
def logs(job_id: int, follow: bool, as_json: bool) -> None:
    """sky jobs logs ID: the job's output (every run of it), followed until it ends.

    \b
    Example:
      steady jobs logs 3 --no-follow
    """
    _follow(Client(_home()), job_id, follow, as_json)


@jobs.command("cancel")
@click.argument("job_ids", nargs=-1, type=int)
@click.option("-p", "--pool", "pool_name", help="Every job of this pool not ended.")
@click.option("-a", "--all", "all_", is_flag=True, help="Every job not ended, of every pool.")
@click.option("-n", "--name", help="The jobs of this name not ended.")
@yes_prompt_option
@json_option
@reports_errors
def cancel(
    job_ids: tuple[int, ...],
    pool_name: str | None,
    all_: bool,
    name: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    """sky jobs cancel ID... (or -p POOL, --all, --name NAME): stop jobs, waiting
    or running.

    Asks first, as SkyPilot does (-y skips the question; an answer piped in
    is read; with none to read, -y is needed).

    \b
    Example:
      steady jobs cancel 3 -y
    """
    client = Client(_home())
    chosen, question = _to_cancel(client, job_ids, pool_name, all_, name)
    if not chosen:
        if as_json:
            _echo_json({"cancelled": []})
        else:
            console.print("No job to cancel.", markup=False)
        return
    confirm(question, yes)
    done = [client.call("POST", f"/api/v1/jobs/{job_id}/cancel") for job_id in chosen]
    if as_json:
        _echo_json({"cancelled": done})
        return
    for result in done:
        console.print(result["message"], markup=False)
