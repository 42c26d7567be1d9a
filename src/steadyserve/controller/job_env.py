"""The variables a pool's job gets beyond its worker's: SkyPilot's for a managed job.

A job written for SkyPilot reads where it runs from SkyPilot's variables; each
has the meaning SkyPilot gives it, for a job that runs on one worker (one
node) of a pool on this machine (docs/pools.md has the table):

- ``SKYPILOT_TASK_ID``: ``sky-managed-<submitted, UTC>_<name>_<job id>-0``, the
  same across recoveries, so a job finds its checkpoints again;
- ``SKYPILOT_JOB_ID`` (and ``STEADY_JOB_ID``): the job's id;
- ``SKYPILOT_NUM_NODES`` 1 and ``SKYPILOT_NODE_RANK`` 0 (one worker a job);
- ``SKYPILOT_NODE_IPS``: the worker's address, one a line;
- ``SKYPILOT_NUM_GPUS_PER_NODE``: the GPUs the worker was given (0 without);
- ``SKYPILOT_CLUSTER_INFO``: JSON, ``cluster_name`` (``POOL-WORKER``), ``cloud``
  (``local``), ``region`` and ``zone`` (null), ``num_nodes`` (1);
- ``SKYPILOT_JOB_RANK``, ``SKYPILOT_NUM_JOBS``: ``--num-jobs``'s rank and count,
  0 and 1 for a single job.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from steadyserve.controller.job_tables import JobRow
from steadyserve.core.capacity import Assignment
from steadyserve.store import ReplicaRow

JOB_ID = "STEADY_JOB_ID"
SKYPILOT_JOB_ID = "SKYPILOT_JOB_ID"
TASK_ID = "SKYPILOT_TASK_ID"
NUM_NODES = "SKYPILOT_NUM_NODES"
NODE_RANK = "SKYPILOT_NODE_RANK"
NODE_IPS = "SKYPILOT_NODE_IPS"
NUM_GPUS_PER_NODE = "SKYPILOT_NUM_GPUS_PER_NODE"
CLUSTER_INFO = "SKYPILOT_CLUSTER_INFO"
JOB_RANK = "SKYPILOT_JOB_RANK"
NUM_JOBS = "SKYPILOT_NUM_JOBS"


def task_id(job: JobRow) -> str:
    """SkyPilot's managed-job task id: when it was submitted, its name, its id and
    task 0 (a pool's job is one task)."""
    stamp = datetime.fromtimestamp(job.submitted_at, tz=timezone.utc)
    return f"sky-managed-{stamp.strftime('%Y-%m-%d-%H-%M-%S-%f')}_{job.name}_{job.id}-0"


def job_env(job: JobRow, worker: ReplicaRow) -> dict[str, str]:
    """The job's own ``envs`` (with its ``--num-jobs`` rank), then the variables it
    cannot fake: its ids and where it runs."""
    held = Assignment.from_json(worker.assignment)
    gpus = len(held.gpus) + len(held.uuids) if held is not None else 0
    info = {
        "cluster_name": f"{job.pool}-{worker.id}",
        "cloud": "local",
        "region": None,
        "zone": None,
        "num_nodes": 1,
    }
    env = {JOB_RANK: "0", NUM_JOBS: "1", **job.envs}
    env.update(
        {
            JOB_ID: str(job.id),
            SKYPILOT_JOB_ID: str(job.id),
            TASK_ID: task_id(job),
            NUM_NODES: "1",
            NODE_RANK: "0",
            NODE_IPS: worker.ip or "127.0.0.1",
            NUM_GPUS_PER_NODE: str(gpus),
            CLUSTER_INFO: json.dumps(info),
        }
    )
    return env
