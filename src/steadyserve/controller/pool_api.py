"""The API of pools' jobs: submit, list, read one, cancel (``steady jobs ...``).

A pool itself is made, listed and taken down as a service is (``steady jobs
pool apply|status|down`` call the services' routes); these routes are the job
queue's. Every one needs the home's token, as every other route does
(docs/security.md): a job runs a command on this machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from steadyserve.controller.errors import BadInput, NotFound, json_object
from steadyserve.controller.job_tables import JobRow, JobTable
from steadyserve.controller.pool import job_log
from steadyserve.controller.pool_runtime import PoolRuntime
from steadyserve.core import job_queue
from steadyserve.core.jobs import (
    DEFAULT_RECOVERY_STRATEGY,
    RECOVERY_STRATEGIES,
    JobRecovery,
    JobStatus,
)

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller


def _pool(controller: Controller, name: str) -> PoolRuntime:
    runtime = controller.services.get(name)
    if not isinstance(runtime, PoolRuntime):
        kind = "a service, not a pool" if runtime is not None else "no pool of that name runs"
        raise NotFound(f"--pool {name}: {kind} (steady jobs pool status lists pools)")
    return runtime


def _job_id(text: str) -> int:
    if not text.isdigit():
        raise BadInput(f"job id must be a whole number (got {text[:20]!r})")
    return int(text)


def _text_map(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadInput(f"{field} must map names to strings")
    return dict(value)


MAX_WORKERS = 1000
MAX_RESTARTS = 1000


def job_recovery(value: Any) -> JobRecovery:
    """The job's ``job_recovery`` as the CLI sends it (compat/sky_jobs.py read the file)."""
    if value is None:
        return JobRecovery()
    if not isinstance(value, dict) or set(value) - {
        "strategy",
        "max_restarts_on_errors",
        "recover_on_exit_codes",
    }:
        raise BadInput(
            "job_recovery: strategy, max_restarts_on_errors and recover_on_exit_codes only"
        )
    strategy = value.get("strategy", DEFAULT_RECOVERY_STRATEGY)
    restarts = value.get("max_restarts_on_errors", 0)
    codes = value.get("recover_on_exit_codes", [])
    if strategy not in RECOVERY_STRATEGIES:
        raise BadInput(f"job_recovery.strategy must be one of {', '.join(RECOVERY_STRATEGIES)}")
    if not isinstance(restarts, int) or isinstance(restarts, bool):
        raise BadInput("job_recovery.max_restarts_on_errors must be a whole number")
    if not 0 <= restarts <= MAX_RESTARTS:
        raise BadInput(f"job_recovery.max_restarts_on_errors must be from 0 to {MAX_RESTARTS}")
    if not isinstance(codes, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in codes
    ):
        raise BadInput("job_recovery.recover_on_exit_codes must be exit codes (0 to 255)")
    return JobRecovery(restarts, frozenset(codes), strategy)


def _whole(query: Mapping[str, str], key: str) -> int | None:
    text = query.get(key)
    if text is None:
        return None
    if not text.lstrip("-").isdigit() or len(text) > 9:
        raise BadInput(f"{key} must be a whole number (got {text[:20]!r})")
    return int(text)


def queue_filters(query: Mapping[str, str]) -> job_queue.QueueFilters:
    """``GET /api/v1/jobs``'s filters, SkyPilot's queue's: ``ids=1,2``,
    ``name_match``, ``pool_match`` (contained in the name, the pool),
    ``status=PENDING,RUNNING``, ``skip_finished=1``, ``page`` and ``limit``."""
    ids = query.get("ids")
    if ids is not None and not all(part.isdigit() for part in ids.split(",")):
        raise BadInput(f"ids must be job ids, comma-separated (got {ids[:40]!r})")
    statuses = None
    if "status" in query:
        names = [s.strip().upper() for s in query["status"].split(",") if s.strip()]
        unknown = [s for s in names if s not in JobStatus.__members__]
        if unknown or not names:
            known = ", ".join(JobStatus.__members__)
            raise BadInput(f"status must be among {known} (got {query['status'][:40]!r})")
        statuses = frozenset(JobStatus(s) for s in names)
    skip = query.get("skip_finished", "0")
    if skip not in ("0", "1", "true", "false"):
        raise BadInput(f"skip_finished must be 1 or 0 (got {skip[:20]!r})")
    try:
        return job_queue.QueueFilters(
            job_ids=frozenset(int(i) for i in ids.split(",")) if ids is not None else None,
            name_match=query.get("name_match"),
            pool_match=query.get("pool_match"),
            statuses=statuses,
            skip_finished=skip in ("1", "true"),
            page=_whole(query, "page"),
            limit=_whole(query, "limit"),
        )
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def queue_page(jobs: list[dict[str, Any]], filters: job_queue.QueueFilters) -> dict[str, Any]:
    """The body of ``GET /api/v1/jobs``: the page of jobs, how many match in all,
    and the matches by state (SkyPilot's queue: jobs, total, status_counts)."""
    page, total = job_queue.select(jobs, filters)
    counts = job_queue.status_counts(jobs, filters)
    return {"jobs": list(page), "total": total, "status_counts": counts}


def resized(spec_json: str, workers: Any) -> str:
    """The pool's spec with a fixed size of ``workers``
    (``sky jobs pool apply -p NAME --workers N``): an autoscaled pool's bounds,
    threshold and delays go with it; the rest of the spec stays as it is."""
    if (
        not isinstance(workers, int)
        or isinstance(workers, bool)
        or not (0 <= workers <= MAX_WORKERS)
    ):
        raise BadInput(f"--workers must be a whole number from 0 to {MAX_WORKERS}")
    doc = json.loads(spec_json)
    service = {k: v for k, v in doc["service"].items() if k != "replicas"}
    doc["service"] = {**service, "pool": {"workers": workers}}
    return json.dumps(doc)


def add_routes(routes: web.RouteTableDef, controller: Controller) -> None:
    table = JobTable(controller.store)

    def job(job_id: int) -> JobRow:
        found = table.get(job_id)
        if found is None:
            raise NotFound(f"unknown job: {job_id}")
        return found

    def as_json(row: JobRow) -> dict[str, Any]:
        return {**row.to_json(), "log": str(job_log(controller.home, row.id))}

    @routes.post("/api/v1/pools/{name}/jobs")
    async def submit(request: web.Request) -> web.Response:
        pool = _pool(controller, request.match_info["name"])
        data = await json_object(request)
        name, run = data.get("name"), data.get("run")
        if not isinstance(run, str) or not run.strip():
            raise BadInput("run: a job needs a command to run")
        if not isinstance(name, str) or not name:
            raise BadInput("name: a job needs a name")
        envs = _text_map(data.get("envs"), "envs")
        failure = pool.jobs.failure()
        if failure is not None:
            raise BadInput(
                f"pool {pool.name} is FAILED: {failure} (fix its file and apply it again,"
                f" or steady jobs pool down {pool.name})"
            )
        recovery = job_recovery(data.get("job_recovery"))
        row = table.add(pool.name, name, run, envs, pool.clock.wall(), recovery)
        pool.wake()
        return web.json_response(as_json(row), status=201)

    @routes.post("/api/v1/pools/{name}/workers")
    async def resize(request: web.Request) -> web.Response:
        """A new size for the pool, from the spec it runs (no file): in place, as
        any size change is; the workers that hold jobs keep them."""
        pool = _pool(controller, request.match_info["name"])
        data = await json_object(request)
        mode = data.get("mode")
        if mode is not None and not isinstance(mode, str):
            raise BadInput("--mode must be rolling or blue_green")
        result = await controller.update_service(
            pool.name,
            resized(pool.spec.spec_json(), data.get("workers")),
            "",
            mode=mode,
            dry_run=False,
            keep_files=True,
        )
        return web.json_response(result)

    @routes.get("/api/v1/jobs")
    async def queue(request: web.Request) -> web.Response:
        pool = request.query.get("pool")
        filters = queue_filters(request.query)
        rows = table.of_pool(pool) if pool else table.all()
        return web.json_response(queue_page([as_json(r) for r in rows], filters))

    @routes.get("/api/v1/jobs/{id}")
    async def one(request: web.Request) -> web.Response:
        return web.json_response(as_json(job(_job_id(request.match_info["id"]))))

    @routes.post("/api/v1/jobs/{id}/cancel")
    async def cancel(request: web.Request) -> web.Response:
        row = job(_job_id(request.match_info["id"]))
        if row.status.is_terminal:
            raise BadInput(f"job {row.id} already ended ({row.status}): nothing to cancel")
        runtime = controller.services.get(row.pool)
        if not isinstance(runtime, PoolRuntime):
            raise BadInput(f"job {row.id}: its pool {row.pool} is going down")
        return web.json_response({"id": row.id, "message": runtime.jobs.cancel(row.id)})
