"""The tables of ``steady jobs``: pools and their workers, and the job queue,
laid out as ``sky jobs pool status`` and ``sky jobs queue`` print them."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

from steadyserve.cli.tables import _row, _table, format_ago, format_uptime


def policy_line(policy: dict[str, Any]) -> str:
    """SkyPilot's "Worker policy" line: fixed size, or autoscaling bounds."""
    if policy.get("max_workers") is not None:
        low = policy.get("min_workers")
        low = policy.get("workers") if low is None else low
        return f"Autoscaling ({low or 0}..{policy['max_workers']} workers)"
    count = policy.get("workers") or 0
    return f"Fixed-size ({count} worker{'' if count == 1 else 's'})"


def pools_table(pools: list[dict[str, Any]]) -> Table:
    table = _table(("NAME", "VERSION", "UPTIME", "STATUS", "WORKERS", "PENDING", "POLICY"))
    for pool in pools:
        info = pool["pool"]
        _row(
            table,
            pool["name"],
            str(pool["version"]),
            format_uptime(pool["uptime_s"]) if pool.get("uptime_s") is not None else "-",
            str(pool["status"]),
            f"{pool['ready_replicas']}/{pool['target_replicas']}",
            str(info["pending_jobs"]),
            policy_line(info["policy"]),
        )
    return table


def workers_table(pools: list[dict[str, Any]]) -> Table:
    table = _table(("POOL", "ID", "VERSION", "LAUNCHED", "STATUS", "JOB"))
    now = time.time()
    for pool in pools:
        busy = pool["pool"]["jobs"]
        for worker in pool["replicas"]:
            job = busy.get(str(worker["id"]))
            _row(
                table,
                pool["name"],
                str(worker["id"]),
                str(worker["version"]),
                format_ago(worker["launched_at"], now) if worker.get("launched_at") else "-",
                str(worker["status"]),
                str(job) if job is not None else "-",
            )
    return table


def _duration(job: dict[str, Any], now: float) -> str:
    start = job.get("started_at")
    if start is None:
        return "-"
    end = job.get("ended_at") or now
    return format_uptime(max(0.0, end - start))


def queue_table(jobs: list[dict[str, Any]]) -> Table:
    table = _table(
        ("ID", "NAME", "POOL", "WORKER", "SUBMITTED", "DURATION", "#RECOVERIES", "STATUS")
    )
    now = time.time()
    for job in jobs:
        worker = job.get("worker")
        _row(
            table,
            str(job["id"]),
            job["name"],
            job["pool"],
            str(worker) if worker is not None else "-",
            format_ago(job["submitted_at"], now),
            _duration(job, now),
            str(job.get("recoveries", 0)),
            job["status"],
        )
    return table
