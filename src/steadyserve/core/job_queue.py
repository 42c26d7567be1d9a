"""Which jobs ``steady jobs queue`` (``GET /api/v1/jobs``) lists, pure: SkyPilot's
queue filters and pages (``sky jobs queue``, its API's ``queue``).

A job here is its JSON record (``JobRow.to_json``: ``id``, ``name``, ``pool``,
``status``, ...). As SkyPilot filters its managed jobs: ``job_ids`` keeps those
ids, ``name_match`` and ``pool_match`` keep the jobs whose name or pool contains
the text (SkyPilot's ``LIKE '%text%'``; a job without one never matches),
``statuses`` keeps those states, ``skip_finished`` drops the ended ones. The
``total`` is the count of matches before the page is cut; page ``p`` of ``limit``
is matches ``(p-1)*limit`` to ``p*limit`` (page 1 when only ``limit`` is given),
and a page without a limit, a page or limit below 1, is refused (ValueError),
as SkyPilot's ``queue`` refuses them. The order is the one given (oldest first
here). ``status_counts`` counts the matches by state, with every filter but
``statuses`` and the page: what each state's tab would hold.

Worked example: jobs 1..25, ``QueueFilters(page=3, limit=10)``: jobs 21..25, total 25.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from steadyserve.core.jobs import JobStatus

Job = Mapping[str, Any]


@dataclass(frozen=True)
class QueueFilters:
    job_ids: frozenset[int] | None = None
    name_match: str | None = None
    pool_match: str | None = None
    statuses: frozenset[JobStatus] | None = None
    skip_finished: bool = False
    page: int | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.page is not None and self.limit is None:
            raise ValueError("a page needs a limit (jobs a page)")
        if self.page is not None and self.page < 1:
            raise ValueError(f"page must be 1 or more (got {self.page})")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be 1 or more (got {self.limit})")


def _contains(value: Any, text: str | None) -> bool:
    return text is None or (value is not None and text in str(value))


def _finished(job: Job) -> bool:
    status = job.get("status")
    return status is not None and JobStatus(status).is_terminal


def _matches(job: Job, f: QueueFilters) -> bool:
    return (
        (f.job_ids is None or job.get("id") in f.job_ids)
        and _contains(job.get("name"), f.name_match)
        and _contains(job.get("pool"), f.pool_match)
        and (f.statuses is None or job.get("status") in f.statuses)
        and not (f.skip_finished and _finished(job))
    )


def select(jobs: Iterable[Job], filters: QueueFilters) -> tuple[list[Job], int]:
    """The page of the jobs that match, and how many match in all."""
    matched = [job for job in jobs if _matches(job, filters)]
    if filters.limit is None:
        return matched, len(matched)
    start = ((filters.page or 1) - 1) * filters.limit
    return matched[start : start + filters.limit], len(matched)


def status_counts(jobs: Sequence[Job], filters: QueueFilters) -> dict[str, int]:
    """Matches by state (only the states some job is in), ``statuses`` and the page aside."""
    every = replace(filters, statuses=None, page=None, limit=None)
    counts: dict[str, int] = {}
    for job in select(jobs, every)[0]:
        status = str(job.get("status"))
        counts[status] = counts.get(status, 0) + 1
    return counts
