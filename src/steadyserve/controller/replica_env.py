"""What a replica is started with: its command, its environment, its control secret.

The runner contract (``replica_contract``) names the variables; this module
fills them for one replica of one version. The address (``PORT``, the control
port) is not here: the backend picks it and adds it (backends/base.py).
"""

from __future__ import annotations

import json
import os
import sys

from steadyserve.core.capacity import Assignment
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.store import ReplicaRow
from steadyserve.wire import replica_contract as contract

WORKER_HOLDS = "import signal; signal.pause()"
"""A pool worker's own process: it waits (SIGTERM ends it) while jobs run in its
environment (controller/pool.py); its life is the worker's."""


class ReplicaEnvironment:
    """One service's replica environments; needs only the home and the service name."""

    def __init__(self, home: Home, service: str) -> None:
        self.home = home
        self.service = service

    def env(self, replica: ReplicaRow, spec: ServiceSpec) -> dict[str, str]:
        """A clean environment: the contract's base variables, the file's ``envs``,
        then the documented variables (so ``envs`` cannot fake a replica's identity).
        Nothing else of the controller's environment, its token above all."""
        env = contract.base_env(os.environ)
        # Python's prints reach the replica's log when they happen, as in SkyServe's
        # logs (a log file would otherwise hold them until a buffer fills).
        env[contract.PYTHONUNBUFFERED] = "1"
        env.update(spec.envs)
        env.update({k: v for k, v in spec.secrets.items() if v is not None})  # skyserve
        env.update(
            {
                contract.REPLICA_ID: str(replica.id),
                contract.SKYPILOT_REPLICA_ID: str(replica.id),
                contract.SERVICE_NAME: self.service,
                contract.SERVICE_VERSION: str(replica.version),
                contract.REPLICA_TAG: contract.replica_tag(
                    self.home.root, self.service, replica.id
                ),
            }
        )
        held = Assignment.from_json(replica.assignment)
        if held is not None and held.gpus:
            # Its own devices only, whatever envs say: two replicas on one GPU is an
            # out-of-memory crash, not a service.
            ids = ",".join(str(i) for i in held.gpus)
            env[contract.CUDA_VISIBLE_DEVICES] = env[contract.NVIDIA_VISIBLE_DEVICES] = ids
            env.setdefault(contract.CUDA_DEVICE_ORDER, "PCI_BUS_ID")
        if spec.import_path is not None:  # a Python replica: the runner's own settings
            svc = spec.service
            env[contract.MAX_ONGOING_REQUESTS] = str(svc.max_ongoing_requests)
            env[contract.HEALTH_CHECK_TIMEOUT_S] = str(svc.health_check_timeout_s)
            env[contract.GRACEFUL_SHUTDOWN_TIMEOUT_S] = str(svc.graceful_shutdown_timeout_s)
            env[contract.GRACEFUL_SHUTDOWN_WAIT_LOOP_S] = str(svc.graceful_shutdown_wait_loop_s)
            if svc.user_config is not None:
                env[contract.USER_CONFIG] = json.dumps(svc.user_config)
            env[contract.CONTROL_SECRET] = self.control_secret(replica)
            # Handles (steadyserve.serve) read the callees' route tables and call them.
            env[contract.CONTROLLER_FILE] = str(self.home.controller_file)
            env[contract.GRAPH_SECRET] = contract.graph_secret(self.home.root)
            env[contract.ROUTES_TOKEN] = contract.routes_token(self.home.root)
        return env

    @staticmethod
    def setup_env(env: dict[str, str]) -> dict[str, str]:
        """setup is user code too: it never sees the control or graph secrets."""
        hidden = (contract.CONTROL_SECRET, contract.GRAPH_SECRET)
        return {k: v for k, v in env.items() if k not in hidden}

    def control_headers(self, replica: ReplicaRow) -> dict[str, str]:
        """What every request to a Python replica's control port carries."""
        return {contract.CONTROL_SECRET_HEADER: self.control_secret(replica)}

    def control_secret(self, replica: ReplicaRow) -> str:
        return contract.control_secret(
            self.home.root, self.service, replica.id, replica.launched_at
        )

    @staticmethod
    def command(spec: ServiceSpec) -> list[str]:
        if spec.service.pool is not None:  # a worker holds its environment; jobs run beside it
            return [sys.executable, "-c", WORKER_HOLDS]
        if spec.run is not None:
            return ["bash", "-c", spec.run]
        assert spec.import_path is not None
        return [sys.executable, "-m", "steadyserve.replica", spec.import_path]
