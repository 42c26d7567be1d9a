"""SkyPilot's own unit tests of the managed-job queue's filters and pages, ported.

Source: repository skypilot-org/skypilot, path
tests/unit_tests/test_sky/jobs/test_server_queue.py, commit
ad82b4d86d6ca15ec79ebe82ac39c07bd13c7718. The cases whose subject has a
counterpart here, in their order, with their inputs and expected values as
written; only the call surface is translated:

- a job is its JSON record (``steady jobs queue --json``): SkyPilot's ``job_id``
  is ``id``, ``job_name`` is ``name``; ``pool`` and ``status`` keep their names
  (a status that is not terminal, SkyPilot's ``DummyStatus``, is ``PENDING``),
  and the keys nothing here reads (``user_name``, ``workspace``) stay in the record;
- ``jobs_utils.filter_jobs(jobs, workspace, name, pool, offset, limit)`` is
  ``steadyserve.core.job_queue.select`` with a ``QueueFilters`` (SkyPilot's
  ``offset`` is the page number, as its test uses it: ``page`` here); its
  ``AssertionError`` for a page without a limit is a ``ValueError`` here;
- ``jobs_core.queue(...)`` (the API server's queue) is the body of
  ``GET /api/v1/jobs``: ``pool_api.queue_filters`` of the query, then
  ``pool_api.queue_page``; its ``ValueError`` is the route's ``BadInput`` (400);
- ``jobs_utils.dump_managed_job_queue(...)`` (the controller's queue) is
  ``pool_api.queue_page`` too: its ``total`` and ``jobs``.

Workspaces and users have no counterpart (one home, one owner): the filter of
a workspace (``workspace_match``) is left out where a case passes one beside
the filters it tests (``test_filter_jobs_match_filters``' first step,
``test_queue_pagination``'s ``'ws'``, which every job is in,
``test_dump_managed_job_queue_with_filters``' ``'ws1'``). Not ported:
test_queue_returns_filtered_and_total, test_queue_user_match_none and
test_queue_all_users_filtering (users), test_queue_workspace_filtering,
test_dump_managed_job_queue_with_user_hashes, _with_accessible_workspaces and
_empty_result (workspaces), test_queue_skip_finished_includes_all_tasks_of_active_jobs
(a job of several tasks: a job here is one ``run``),
test_dump_managed_job_queue_priority_blocking (priorities),
_job_duration_calculation and _recovering_job (SkyPilot's ``job_duration`` and
``last_recovered_at``, time run without the recoveries, which no job here
records), _with_failure_reason, _failure_reason_only and _alive_backoff_state
(the ``details`` SkyPilot builds from its schedule states).
"""

from __future__ import annotations

from typing import Any

import pytest

from steadyserve.controller import pool_api
from steadyserve.controller.errors import BadInput
from steadyserve.core.job_queue import QueueFilters, select
from steadyserve.core.jobs import JobStatus


def _make_job(
    job_id: int,
    user_name: str | None = "alice",
    workspace: str | None = "ws",
    job_name: str | None = "train",
    pool: str | None = "default",
    status: str = "PENDING",
) -> dict[str, Any]:
    return {
        "id": job_id,
        "user_name": user_name,
        "workspace": workspace,
        "name": job_name,
        "pool": pool,
        "status": status,
    }


def _filter_jobs(
    jobs: list[dict[str, Any]],
    name_match: str | None,
    pool_match: str | None,
    offset: int | None,
    limit: int | None,
) -> tuple[list[Any], int]:
    """``jobs_utils.filter_jobs`` with its workspace argument left out."""
    return select(
        jobs, QueueFilters(name_match=name_match, pool_match=pool_match, page=offset, limit=limit)
    )


def _queue(jobs: list[dict[str, Any]], **query: str) -> tuple[list[Any], int]:
    """``jobs_core.queue``: ``GET /api/v1/jobs?...`` over these jobs."""
    body = pool_api.queue_page(jobs, pool_api.queue_filters(query))
    return body["jobs"], body["total"]


def _dump(jobs: list[dict[str, Any]], **filters: Any) -> dict[str, Any]:
    """``dump_managed_job_queue`` decoded: the route's body for these filters."""
    return pool_api.queue_page(jobs, QueueFilters(**filters))


class TestFilterJobs:
    def test_filter_jobs_no_filters_returns_all_and_total(self) -> None:
        jobs = [_make_job(i) for i in range(5)]
        filtered, total = _filter_jobs(jobs, None, None, None, None)
        assert total == 5
        assert len(filtered) == 5
        assert [j["id"] for j in filtered] == list(range(0, 5))

    def test_filter_jobs_match_filters(self) -> None:
        jobs = [
            _make_job(1, workspace="ws-a", job_name="aa", pool="p1"),
            _make_job(2, workspace="ws-b", job_name="ab", pool="p2"),
            _make_job(3, workspace="ws-b", job_name="ba", pool="p2"),
        ]
        # (SkyPilot's workspace match '-b' is left out: see the header.)

        # job name match
        filtered, total = _filter_jobs(jobs, "a", None, None, None)
        assert total == 3
        assert [j["id"] for j in filtered] == [1, 2, 3]

        # pool match
        filtered, total = _filter_jobs(jobs, None, "2", None, None)
        assert total == 2
        assert [j["id"] for j in filtered] == [2, 3]

    def test_filter_jobs_pagination(self) -> None:
        jobs = [_make_job(i) for i in range(1, 26)]
        # page 1, limit 10
        page1, total = _filter_jobs(jobs, None, None, 1, 10)
        assert total == 25
        assert [j["id"] for j in page1] == list(range(1, 11))

        # page 3, limit 10
        page3, total = _filter_jobs(jobs, None, None, 3, 10)
        assert total == 25
        assert [j["id"] for j in page3] == list(range(21, 26))

        # a page without a limit is refused (SkyPilot's helper asserts)
        with pytest.raises(ValueError):
            _filter_jobs(jobs, None, None, 1, None)

    def test_filter_jobs_missing_keys_and_empty_values(self) -> None:
        jobs: list[dict[str, Any]] = [
            {},  # completely empty
            {"id": 1},  # empty user_name
            {"id": 2},  # minimal user case
            {"id": 3, "workspace": ""},  # empty workspace
            {"id": 4, "name": "train"},
            {"id": 5, "pool": None},
        ]

        # SkyPilot's comment says workspace; the text is its name_match argument
        filtered, total = _filter_jobs(jobs, "ws", None, None, None)
        assert total == 0

        # With pool match
        filtered, total = _filter_jobs(jobs, None, "p2", None, None)
        assert total == 0

        # With job name match
        filtered, total = _filter_jobs(jobs, "tr", None, None, None)
        assert total == 1
        assert [j["id"] for j in filtered] == [4]

    def test_filter_jobs_non_string_values(self) -> None:
        jobs: list[dict[str, Any]] = [
            {"id": 1, "pool": 1234, "workspace": "w", "name": "j", "status": "PENDING"},
            {"id": 2, "pool": 56, "workspace": "w", "name": "j", "status": "PENDING"},
        ]
        # pool as int is matched as its text
        filtered, total = _filter_jobs(jobs, None, "12", None, None)
        assert total == 1
        assert [j["id"] for j in filtered] == [1]


class TestQueue:
    def test_queue_pagination(self) -> None:
        jobs = [_make_job(i, workspace="ws") for i in range(1, 31)]

        # Page 2, limit 10 (SkyPilot's workspace_match 'ws', every job's, left out)
        filtered, total = _queue(jobs, page="2", limit="10")
        assert total == 30
        assert [j["id"] for j in filtered] == list(range(11, 21))

    def test_queue_offset_limit_value_errors(self) -> None:
        jobs = [_make_job(1)]
        # offset without limit
        with pytest.raises(BadInput):
            _queue(jobs, page="1")
        # invalid offset
        with pytest.raises(BadInput):
            _queue(jobs, page="0", limit="10")
        # invalid limit
        with pytest.raises(BadInput):
            _queue(jobs, page="1", limit="0")

    def test_queue_filter_by_job_ids(self) -> None:
        jobs = [_make_job(1), _make_job(2), _make_job(3)]
        filtered, total = _queue(jobs, ids="2,3")
        assert total == 2
        assert sorted([j["id"] for j in filtered]) == [2, 3]


class TestDumpManagedJobQueue:
    def _make_test_job(self, job_id: int, **kwargs: Any) -> dict[str, Any]:
        """A test job with SkyPilot's defaults, as far as a record here has them."""
        defaults: dict[str, Any] = {
            "id": job_id,
            "task_name": f"task_{job_id}",
            "name": f"job_{job_id}",
            "workspace": "default",
            "pool": "default",
            "status": "PENDING",
        }
        defaults.update(kwargs)
        return defaults

    def test_dump_managed_job_queue_basic(self) -> None:
        jobs = [self._make_test_job(1), self._make_test_job(2), self._make_test_job(3)]
        decoded = _dump(jobs)
        assert decoded["total"] == 3
        assert len(decoded["jobs"]) == 3
        assert [j["id"] for j in decoded["jobs"]] == [1, 2, 3]

    def test_dump_managed_job_queue_with_filters(self) -> None:
        jobs = [
            self._make_test_job(1, workspace="ws1", name="job_a", pool="pool1"),
            self._make_test_job(2, workspace="ws2", name="job_b", pool="pool1"),
            self._make_test_job(3, workspace="ws1", name="job_c", pool="pool2"),
        ]
        # (SkyPilot's workspace_match 'ws1' is left out: see the header.)
        decoded = _dump(jobs, name_match="job_a", pool_match="pool1")
        assert decoded["total"] == 1
        assert len(decoded["jobs"]) == 1
        assert decoded["jobs"][0]["id"] == 1

    def test_dump_managed_job_queue_with_pagination(self) -> None:
        jobs = [self._make_test_job(i) for i in range(1, 11)]
        decoded = _dump(jobs, page=2, limit=3)
        assert decoded["total"] == 10
        assert len(decoded["jobs"]) == 3
        assert [j["id"] for j in decoded["jobs"]] == [4, 5, 6]

    def test_dump_managed_job_queue_with_job_ids(self) -> None:
        jobs = [self._make_test_job(i) for i in range(1, 6)]
        decoded = _dump(jobs, job_ids=frozenset([2, 4]))
        assert decoded["total"] == 2
        assert len(decoded["jobs"]) == 2
        assert [j["id"] for j in decoded["jobs"]] == [2, 4]

    def test_dump_managed_job_queue_skip_finished(self) -> None:
        jobs = [
            self._make_test_job(1, status=JobStatus.RUNNING.value),
            self._make_test_job(2, status=JobStatus.SUCCEEDED.value),
            self._make_test_job(3, status=JobStatus.FAILED.value),
            self._make_test_job(4, status=JobStatus.PENDING.value),
        ]
        decoded = _dump(jobs, skip_finished=True)
        # Should only include non-terminal statuses (RUNNING, PENDING)
        assert decoded["total"] == 2
        assert len(decoded["jobs"]) == 2
        job_ids = [j["id"] for j in decoded["jobs"]]
        assert 1 in job_ids
        assert 4 in job_ids
