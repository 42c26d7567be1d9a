"""A pool's job file and the variables its job gets: ``resources.job_recovery``
read as SkyPilot writes it (a strategy's name or a mapping), a misspelt key named
with the one meant, and SkyPilot's managed-job variables with their meanings."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from steadyserve.compat.sky_jobs import parse_job
from steadyserve.controller.errors import BadInput
from steadyserve.controller.job_env import job_env
from steadyserve.controller.job_tables import JobRow
from steadyserve.controller.pool_api import job_recovery
from steadyserve.core.capacity import Assignment
from steadyserve.core.jobs import JobRecovery, JobStatus
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import SpecError
from steadyserve.store import ReplicaRow


def _job(data: dict[str, Any]) -> Any:
    return parse_job({"run": "true", **data}, "job", {})


_NO_RESTARTS = {
    "strategy": "EAGER_NEXT_REGION",
    "max_restarts_on_errors": 0,
    "recover_on_exit_codes": [],
}


@pytest.mark.parametrize(
    ("recovery", "expected"),
    [
        (None, None),
        ("FAILOVER", {**_NO_RESTARTS, "strategy": "FAILOVER"}),
        ("eager_next_region", _NO_RESTARTS),
        ({"max_restarts_on_errors": 3}, {**_NO_RESTARTS, "max_restarts_on_errors": 3}),
        (
            {"strategy": "FAILOVER", "recover_on_exit_codes": 33},
            {**_NO_RESTARTS, "strategy": "FAILOVER", "recover_on_exit_codes": [33]},
        ),
        ({"recover_on_exit_codes": None}, _NO_RESTARTS),  # as SkyPilot reads a null
    ],
)
def test_job_recovery_as_skypilot_writes_it(recovery: Any, expected: Any) -> None:
    resources = {} if recovery is None else {"job_recovery": recovery}
    job = _job({"resources": resources})
    assert job.job_recovery == expected
    assert job.notes == ()  # honoured: no "runs with the worker's" note


@pytest.mark.parametrize(
    ("recovery", "line"),
    [
        ("SPOT", "resources.job_recovery.strategy: must be one of EAGER_NEXT_REGION, FAILOVER"),
        (
            {"max_restart_on_errors": 1},
            "resources.job_recovery.max_restart_on_errors: unknown field"
            " (did you mean max_restarts_on_errors?)",
        ),
        (
            {"max_restarts_on_errors": -1},
            "resources.job_recovery.max_restarts_on_errors: must be a whole number >= 0",
        ),
        (
            {"recover_on_exit_codes": [300]},
            "resources.job_recovery.recover_on_exit_codes: must be exit codes (0 to 255)",
        ),
        (["x"], "resources.job_recovery: must be a strategy name or a mapping"),
    ],
)
def test_a_bad_job_recovery_is_one_line(recovery: Any, line: str) -> None:
    with pytest.raises(SpecError) as refused:
        _job({"resources": {"job_recovery": recovery}})
    assert refused.value.lines() == [line]


def test_a_misspelt_key_names_the_one_meant() -> None:
    with pytest.raises(SpecError) as refused:
        _job({"nmae": "x"})
    assert refused.value.lines() == ["nmae: unknown field of a job file (did you mean name?)"]


def test_skypilots_variables_and_what_a_job_cannot_fake() -> None:
    job = JobRow(
        id=7,
        pool="gpus",
        name="train",
        status=JobStatus.STARTING,
        run="true",
        envs={"SKYPILOT_JOB_ID": "999", "SKYPILOT_NODE_RANK": "3", "MINE": "x"},
        submitted_at=1_700_000_000.25,
    )
    worker = ReplicaRow(
        service="gpus",
        id=2,
        version=1,
        status=ReplicaStatus.READY,
        launched_at=1_700_000_001.0,
        ip="10.0.0.2",
        assignment=Assignment(gpus=(0, 1)).to_json(),
    )
    env = job_env(job, worker)
    assert env["SKYPILOT_TASK_ID"] == "sky-managed-2023-11-14-22-13-20-250000_train_7-0"
    assert {k: env[k] for k in env if k != "SKYPILOT_TASK_ID" and k != "SKYPILOT_CLUSTER_INFO"} == {
        "MINE": "x",
        "SKYPILOT_JOB_RANK": "0",
        "SKYPILOT_NUM_JOBS": "1",
        "SKYPILOT_JOB_ID": "7",
        "STEADY_JOB_ID": "7",
        "SKYPILOT_NUM_NODES": "1",
        "SKYPILOT_NODE_RANK": "0",
        "SKYPILOT_NODE_IPS": "10.0.0.2",
        "SKYPILOT_NUM_GPUS_PER_NODE": "2",
    }
    assert json.loads(env["SKYPILOT_CLUSTER_INFO"])["cluster_name"] == "gpus-2"
    ranked = job_env(
        JobRow(7, "gpus", "t", JobStatus.STARTING, "true", {"SKYPILOT_JOB_RANK": "3"}), worker
    )
    assert ranked["SKYPILOT_JOB_RANK"] == "3"  # --num-jobs' rank is the job's own


@pytest.mark.parametrize(
    ("sent", "line"),
    [
        (
            {"strategy": "SPOT"},
            "job_recovery.strategy must be one of EAGER_NEXT_REGION, FAILOVER",
        ),
        (
            {"max_restarts": 1},
            "job_recovery: strategy, max_restarts_on_errors and recover_on_exit_codes only",
        ),
        (
            {"max_restarts_on_errors": True},
            "job_recovery.max_restarts_on_errors must be a whole number",
        ),
        (
            {"max_restarts_on_errors": 1001},
            "job_recovery.max_restarts_on_errors must be from 0 to 1000",
        ),
        (
            {"recover_on_exit_codes": [-1]},
            "job_recovery.recover_on_exit_codes must be exit codes (0 to 255)",
        ),
        (
            "FAILOVER",
            "job_recovery: strategy, max_restarts_on_errors and recover_on_exit_codes only",
        ),
    ],
)
def test_the_api_checks_job_recovery_itself(sent: Any, line: str) -> None:
    """A client other than the CLI sends what it likes: one line, nothing queued."""
    with pytest.raises(BadInput, match=re.escape(line)):
        job_recovery(sent)
    assert job_recovery({"max_restarts_on_errors": 2, "recover_on_exit_codes": [33]}) == (
        JobRecovery(2, frozenset({33}))
    )
    assert job_recovery({"strategy": "FAILOVER"}) == JobRecovery(strategy="FAILOVER")
