"""SkyPilot's own unit tests of the managed-job state's queries, ported.

Source: repository skypilot-org/skypilot, path
tests/unit_tests/test_sky/jobs/test_jobs_state.py, commit
7de474b4669f8775da63ecbb4d0f4bde0e913262. The cases whose subject has a
counterpart here, in their order, with their inputs and expected values as
written; only the call surface is translated:

- SkyPilot's temporary SQLite database is the jobs table of a real state file
  here (``JobTable`` on a ``Store`` in ``tmp_path``), and its seed moves each job
  through the same states with the table's own moves (each checked against
  ``JOB_MOVES``): job 1 PENDING, 2 STARTING, 3 RUNNING, 4 SUCCEEDED, 5 FAILED
  ('Test failure'), with SkyPilot's names and pools. A job of ``pool=None``
  (SkyPilot's job on a cluster of its own; every job here is a pool's) is a job
  of the empty pool name, which contains no ``pool_match`` as None contains none.
  The seed's workspaces, users, entrypoints, priorities and DAG files have no
  column here and are left out;
- ``state.get_managed_jobs_total()`` is the count of the table's jobs;
  ``state.get_managed_jobs_with_filters(...)`` and
  ``state.get_status_count_with_filters(...)`` are the body of
  ``GET /api/v1/jobs`` over the table's jobs (``pool_api.queue_page``: its
  ``jobs`` and ``total``, its ``status_counts``) with the same filters
  (``QueueFilters``); a record's ``job_id`` is ``id``, ``job_name`` is ``name``,
  and its ``status`` is the state's name (``JobStatus(...)`` reads it back).

Skipped, as failing here: test_job_ordering, which wants the newest job first;
``steady jobs queue`` and its API list the oldest first, as their ``--json``
contract says (client/contracts.py), and turning that order round would change
that contract for every reader of it, a decision this port leaves open.

Not ported: TestMapResponseFieldToDbColumn, TestBuildManagedJobsWithFiltersNoStatusQuery
and TestBuildManagedJobsWithFiltersQuery (SkyPilot's SQLAlchemy columns and
query objects), TestGetManagedJobsHighestPriority (priorities), and the cases
of workspaces and users (TestGetStatusCountWithFilters' test_with_workspace_filter
and test_with_user_hashes_filter; TestGetManagedJobsWithFilters'
test_with_workspace_filter, test_with_user_hashes_filter, test_combined_filters,
which combines them, and test_with_workspace_match): one home, one owner here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steadyserve.controller.job_tables import JobTable
from steadyserve.controller.pool_api import queue_page
from steadyserve.core.job_queue import QueueFilters
from steadyserve.core.jobs import JobStatus
from steadyserve.store import Store

NOW = 1_700_000_000.0


@pytest.fixture
def _mock_managed_jobs_db_conn(tmp_path: Path) -> Iterator[JobTable]:
    store = Store(tmp_path / "managed_jobs_testing.db")
    yield JobTable(store)
    store.close()


def _add(table: JobTable, name: str, pool: str | None) -> int:
    """SkyPilot's set_job_info_without_job_id + set_pending: a PENDING job."""
    return table.add(pool if pool is not None else "", name, "true", {}, NOW).id


def _move(table: JobTable, job_id: int, *moves: tuple[JobStatus, str, dict[str, Any]]) -> None:
    for status, why, values in moves:
        job = table.get(job_id)
        assert job is not None
        table.move(job, status, why, **values)


STARTING = (JobStatus.STARTING, "given worker 1", {"worker": 1})
STARTED = (JobStatus.RUNNING, "running on worker 1", {"started_at": NOW})


@pytest.fixture
def _seed_test_jobs(_mock_managed_jobs_db_conn: JobTable) -> dict[str, int]:
    table = _mock_managed_jobs_db_conn
    # Job 1: PENDING state (just created)
    job_id1 = _add(table, "test-job-a", "pool1")
    # Job 2: STARTING state (launched but not yet running)
    job_id2 = _add(table, "test-job-b", None)
    _move(table, job_id2, STARTING)
    # Job 3: RUNNING state (actively running)
    job_id3 = _add(table, "test-job-a", "pool2")
    _move(table, job_id3, STARTING, STARTED)
    # Job 4: SUCCEEDED state (completed successfully)
    job_id4 = _add(table, "test-job-c", "pool1")
    succeeded = (JobStatus.SUCCEEDED, "exited with code 0", {"exit_code": 0, "ended_at": NOW})
    _move(table, job_id4, STARTING, STARTED, succeeded)
    # Job 5: FAILED state
    job_id5 = _add(table, "test-job-d", None)
    failed = (JobStatus.FAILED, "Test failure", {"exit_code": 1, "ended_at": NOW})
    _move(table, job_id5, STARTING, STARTED, failed)
    return {
        "job_id1": job_id1,
        "job_id2": job_id2,
        "job_id3": job_id3,
        "job_id4": job_id4,
        "job_id5": job_id5,
    }


def get_managed_jobs_total(table: JobTable) -> int:
    return len(table.all())


def _body(table: JobTable, **filters: Any) -> dict[str, Any]:
    if "job_ids" in filters:
        filters["job_ids"] = frozenset(filters["job_ids"])
    if filters.get("statuses") is not None:
        filters["statuses"] = frozenset(JobStatus(s) for s in filters["statuses"])
    return queue_page([row.to_json() for row in table.all()], QueueFilters(**filters))


def get_managed_jobs_with_filters(table: JobTable, **filters: Any) -> tuple[list[Any], int]:
    body = _body(table, **filters)
    return body["jobs"], body["total"]


def get_status_count_with_filters(table: JobTable, **filters: Any) -> dict[str, int]:
    counts: dict[str, int] = _body(table, **filters)["status_counts"]
    return counts


class TestGetManagedJobsTotal:
    def test_empty_database(self, _mock_managed_jobs_db_conn: JobTable) -> None:
        total = get_managed_jobs_total(_mock_managed_jobs_db_conn)
        assert total == 0

    def test_with_seeded_jobs(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        total = get_managed_jobs_total(_mock_managed_jobs_db_conn)
        # We have 5 jobs seeded
        assert total == 5

    def test_incremental_job_addition(self, _mock_managed_jobs_db_conn: JobTable) -> None:
        table = _mock_managed_jobs_db_conn
        initial_total = get_managed_jobs_total(table)
        assert initial_total == 0

        # Add first job
        _add(table, "job1", None)
        total_after_one = get_managed_jobs_total(table)
        assert total_after_one == 1

        # Add second job
        _add(table, "job2", None)
        total_after_two = get_managed_jobs_total(table)
        assert total_after_two == 2


class TestGetStatusCountWithFilters:
    def test_empty_database(self, _mock_managed_jobs_db_conn: JobTable) -> None:
        result = get_status_count_with_filters(_mock_managed_jobs_db_conn)
        assert result == {}

    def test_with_seeded_jobs(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        result = get_status_count_with_filters(_mock_managed_jobs_db_conn)
        assert result[JobStatus.PENDING.value] == 1
        assert result[JobStatus.STARTING.value] == 1
        assert result[JobStatus.RUNNING.value] == 1
        assert result[JobStatus.SUCCEEDED.value] == 1
        assert result[JobStatus.FAILED.value] == 1

    def test_with_job_ids_filter(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        job_ids = [_seed_test_jobs["job_id1"], _seed_test_jobs["job_id2"]]
        result = get_status_count_with_filters(_mock_managed_jobs_db_conn, job_ids=job_ids)

        # Should only count job 1 (PENDING) and job 2 (STARTING)
        assert result[JobStatus.PENDING.value] == 1
        assert result[JobStatus.STARTING.value] == 1
        assert JobStatus.RUNNING.value not in result
        assert len(result) == 2

    def test_with_skip_finished_flag(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        result = get_status_count_with_filters(_mock_managed_jobs_db_conn, skip_finished=True)

        # Should exclude SUCCEEDED and FAILED jobs
        assert result[JobStatus.PENDING.value] == 1
        assert result[JobStatus.STARTING.value] == 1
        assert result[JobStatus.RUNNING.value] == 1
        assert JobStatus.SUCCEEDED.value not in result
        assert JobStatus.FAILED.value not in result


class TestGetManagedJobsWithFilters:
    def test_empty_database(self, _mock_managed_jobs_db_conn: JobTable) -> None:
        jobs, total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn)
        assert jobs == []
        assert total == 0

    def test_with_seeded_jobs(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        jobs, total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn)
        assert len(jobs) == 5
        assert total == 5

        # Verify that jobs are returned with correct structure
        for job in jobs:
            assert "id" in job
            assert "name" in job
            assert "status" in job
            assert isinstance(JobStatus(job["status"]), JobStatus)

    def test_with_job_ids_filter(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        job_ids = [_seed_test_jobs["job_id1"], _seed_test_jobs["job_id3"]]
        jobs, total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn, job_ids=job_ids)

        assert len(jobs) == 2
        assert total == 2
        returned_job_ids = [job["id"] for job in jobs]
        assert set(returned_job_ids) == set(job_ids)

    def test_with_name_match_filter(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        jobs, total = get_managed_jobs_with_filters(
            _mock_managed_jobs_db_conn, name_match="test-job-a"
        )

        # Jobs with name containing 'test-job-a': job1 and job3
        assert len(jobs) == 2
        assert total == 2
        for job in jobs:
            assert "test-job-a" in job["name"]

    def test_with_pool_match_filter(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        jobs, total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn, pool_match="pool1")

        # Jobs with pool containing 'pool1': job1 and job4
        assert len(jobs) == 2
        assert total == 2
        for job in jobs:
            assert job["pool"] is not None
            assert "pool1" in job["pool"]

    def test_with_status_filter(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        statuses = [JobStatus.PENDING.value, JobStatus.RUNNING.value]
        jobs, total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn, statuses=statuses)

        # Jobs: job1 (PENDING) and job3 (RUNNING)
        assert len(jobs) == 2
        assert total == 2
        for job in jobs:
            assert JobStatus(job["status"]) in [JobStatus.PENDING, JobStatus.RUNNING]

    def test_with_skip_finished_flag(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        jobs, total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn, skip_finished=True)

        # Should exclude SUCCEEDED and FAILED jobs (job4 and job5)
        assert len(jobs) == 3
        assert total == 3
        for job in jobs:
            assert not JobStatus(job["status"]).is_terminal

    def test_with_pagination(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        table = _mock_managed_jobs_db_conn
        # Get first page with limit 2
        jobs_page1, total = get_managed_jobs_with_filters(table, page=1, limit=2)
        assert len(jobs_page1) == 2
        assert total == 5  # Total should be all jobs

        # Get second page with limit 2
        jobs_page2, total = get_managed_jobs_with_filters(table, page=2, limit=2)
        assert len(jobs_page2) == 2
        assert total == 5

        # Get third page with limit 2 (should have 1 job)
        jobs_page3, total = get_managed_jobs_with_filters(table, page=3, limit=2)
        assert len(jobs_page3) == 1
        assert total == 5

        # Verify no overlap between pages
        job_ids_page1 = {job["id"] for job in jobs_page1}
        job_ids_page2 = {job["id"] for job in jobs_page2}
        job_ids_page3 = {job["id"] for job in jobs_page3}
        assert len(job_ids_page1 & job_ids_page2) == 0
        assert len(job_ids_page1 & job_ids_page3) == 0
        assert len(job_ids_page2 & job_ids_page3) == 0

    def test_with_field_selection(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        # SkyPilot selects fields ['job_id', 'job_name', 'status']; a record here
        # carries every field, so the case checks that those are among them.
        jobs, total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn)

        assert len(jobs) == 5
        assert total == 5
        for job in jobs:
            assert "id" in job
            assert "name" in job
            assert "status" in job

    @pytest.mark.skip(
        reason="steady jobs queue lists the oldest job first, by its --json contract;"
        " SkyPilot's newest first (docs/pools.md)"
    )
    def test_job_ordering(
        self, _mock_managed_jobs_db_conn: JobTable, _seed_test_jobs: dict[str, int]
    ) -> None:
        jobs, _total = get_managed_jobs_with_filters(_mock_managed_jobs_db_conn)

        # According to the query, jobs should be ordered by spot_job_id desc
        job_ids = [job["id"] for job in jobs]
        assert job_ids == sorted(job_ids, reverse=True)
