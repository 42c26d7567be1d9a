"""``GET /api/v1/jobs``'s filters, SkyPilot's queue's (core/job_queue.py): the
query read as SkyPilot's API takes it, a bad one refused in one line (400), and
the counts by state that ignore the state filter and the page."""

from __future__ import annotations

import pytest

from steadyserve.controller.errors import BadInput
from steadyserve.controller.pool_api import queue_filters, queue_page
from steadyserve.core.job_queue import QueueFilters
from steadyserve.core.jobs import JobStatus

JOBS = [
    {"id": 1, "name": "train-a", "pool": "gpu", "status": "SUCCEEDED"},
    {"id": 2, "name": "train-b", "pool": "gpu", "status": "FAILED"},
    {"id": 3, "name": "eval", "pool": "cpu", "status": "RUNNING"},
    {"id": 4, "name": "train-c", "pool": "gpu-big", "status": "PENDING"},
]


def test_the_query_is_read_as_skypilots_queue_takes_it() -> None:
    assert queue_filters({}) == QueueFilters()
    got = queue_filters(
        {
            "ids": "4,1",
            "name_match": "train",
            "pool_match": "gpu",
            "status": "pending, Succeeded",
            "skip_finished": "1",
            "page": "2",
            "limit": "5",
        }
    )
    assert got == QueueFilters(
        job_ids=frozenset({1, 4}),
        name_match="train",
        pool_match="gpu",
        statuses=frozenset({JobStatus.PENDING, JobStatus.SUCCEEDED}),
        skip_finished=True,
        page=2,
        limit=5,
    )


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"ids": "1,x"}, "ids must be job ids"),
        ({"status": "DONE"}, "status must be among PENDING"),
        ({"status": ","}, "status must be among"),
        ({"skip_finished": "yes"}, "skip_finished must be 1 or 0"),
        ({"limit": "ten"}, "limit must be a whole number"),
        ({"page": "1"}, "a page needs a limit"),
        ({"page": "0", "limit": "10"}, "page must be 1 or more"),
        ({"limit": "-3"}, "limit must be 1 or more"),
    ],
)
def test_a_bad_query_is_one_line(query: dict[str, str], said: str) -> None:
    with pytest.raises(BadInput) as caught:
        queue_filters(query)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_the_body_has_the_page_the_total_and_counts_by_state_without_the_state_filter() -> None:
    body = queue_page(JOBS, queue_filters({"pool_match": "gpu", "status": "FAILED,PENDING"}))
    assert [j["id"] for j in body["jobs"]] == [2, 4]
    assert body["total"] == 2
    assert body["status_counts"] == {"SUCCEEDED": 1, "FAILED": 1, "PENDING": 1}
    paged = queue_page(JOBS, queue_filters({"limit": "1", "page": "3"}))
    assert ([j["id"] for j in paged["jobs"]], paged["total"]) == ([3], 4)
    assert sum(paged["status_counts"].values()) == 4
