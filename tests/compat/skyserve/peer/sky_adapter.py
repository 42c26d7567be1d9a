"""SkyServe's autoscaler call surface, mapped onto SteadyServe's pure core.

The ported test_serve_autoscaling.py keeps SkyPilot's calls, inputs and
expected values; this module only translates them: a ``SkyServiceSpec`` becomes
a validated ``service.replica_policy`` (``steadyserve.spec``) and its
``QpsPolicy``; one ``_set_target_num_replicas_with_hysteresis()`` is one
decision of ``steadyserve.core.autoscale.decide`` at the time of the next
decision; the request timestamps become one load report of that many requests;
the scaling decisions are the launches and stops of SteadyServe's planner
(``plan_steady``) for the autoscaler's final target. A SkyPilot replica's cluster
handle (``global_user_state.get_handle_from_cluster_name``) is what its
``launched_resources.accelerators`` name: here the replica's ``Assignment``, the
GPUs the inventory gave it, which the controller's ``fleet_of`` reads the
accelerator from. Nothing here computes a result.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from steadyserve.controller.autoscaler import fleet_of
from steadyserve.core.autoscale import (
    LoadSample,
    LoadWindow,
    QpsPolicy,
    ReplicaLoad,
    decide,
    initial_state,
    sky_policy,
)
from steadyserve.core.autoscale.instance_aware import FleetReplica
from steadyserve.core.autoscale.policies import QPS_WINDOW_S
from steadyserve.core.capacity import Assignment
from steadyserve.core.planner import ReplicaView, plan_steady
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ServiceSpec, parse_service
from steadyserve.spec.autoscaling import policy_for
from steadyserve.store import ReplicaRow

_HERE = Path(__file__).parent

INITIAL_VERSION = 1
"""SkyServe's ``constants.INITIAL_VERSION``; SteadyServe's first version is 1 too."""


class serve_constants:
    DEFAULT_INITIAL_DELAY_SECONDS = 1200
    DEFAULT_READINESS_PROBE_TIMEOUT_SECONDS = 15
    AUTOSCALER_NO_REPLICA_DECISION_INTERVAL_SECONDS = sky_policy.NO_REPLICA_DECISION_INTERVAL_S


_PROBE = {
    "readiness_path": "path",
    "initial_delay_seconds": "initial_delay_seconds",
    "readiness_timeout_seconds": "timeout_seconds",
}


def SkyServiceSpec(**data: Any) -> ServiceSpec:
    """SkyPilot's spec fields, as the ``service:`` section of a service file."""
    probe = {_PROBE[k]: v for k, v in data.items() if k in _PROBE}
    service: dict[str, Any] = {"readiness_probe": probe}
    if "load_balancing_policy" in data:
        service["load_balancing_policy"] = data["load_balancing_policy"]
    rest = {k: v for k, v in data.items() if k not in _PROBE and k != "load_balancing_policy"}
    service["replica_policy"] = rest
    return parse_service({"run": "x", "service": service}, base_dir=_HERE)


class AutoscalerDecisionOperator(enum.Enum):
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"


@dataclass
class AutoscalerDecision:
    operator: AutoscalerDecisionOperator
    target: Any


def make_ready_replica(replica_id: int, version: int) -> ReplicaView:
    """SkyPilot's READY ``ReplicaInfo``: SteadyServe's view of a ready replica."""
    return ReplicaView(replica_id, version, ReplicaStatus.READY)


def cluster_name(replica_id: int) -> str:
    """SkyPilot's test names replica N's cluster ``replica-N``."""
    return f"replica-{replica_id}"


def make_handle(accelerator: str) -> Assignment:
    """SkyPilot's cluster handle launched with ``{accelerator: 1}``: the assignment of
    one GPU of that name from the inventory."""
    return Assignment(gpus=(0,), uuids=("GPU-0",), accelerator=accelerator)


global_user_state = SimpleNamespace(get_handle_from_cluster_name=lambda name: None)
"""SkyPilot's cluster table: a replica's handle by cluster name (None: not known,
as for a replica no test gave a handle)."""


def _fleet(spec: ServiceSpec, views: list[ReplicaView], version: int) -> list[FleetReplica]:
    """The replicas as the controller's rows: each holding its handle's GPUs."""
    rows = []
    for view in views:
        held = global_user_state.get_handle_from_cluster_name(cluster_name(view.id))
        assignment = held.to_json() if held is not None else None
        row = ReplicaRow("svc", view.id, view.version, view.status, 0.0, assignment=assignment)
        rows.append(row)
    return fleet_of(spec, rows, version)


class Autoscaler:
    """SkyServe's ``RequestRateAutoscaler``: a QpsPolicy and its ScaleState."""

    def __init__(self, spec: ServiceSpec) -> None:
        self.spec = spec
        policy = policy_for(spec.service)
        assert isinstance(policy, QpsPolicy)
        self.policy = policy
        self.state = initial_state(policy)
        self.latest_version = INITIAL_VERSION
        self.request_timestamps: list[float] = []

    @classmethod
    def from_spec(cls, service_name: str, spec: ServiceSpec) -> Autoscaler:
        return cls(spec)

    @property
    def target_num_replicas(self) -> int:
        return self.state.target

    @target_num_replicas.setter
    def target_num_replicas(self, value: int) -> None:
        self.state = type(self.state)(target=value)

    def _set_target_num_replicas_with_hysteresis(self, fleet: Sequence[FleetReplica] = ()) -> None:
        now = self.state.next_at if self.state.next_at is not None else 0.0
        window = LoadWindow(span=QPS_WINDOW_S)
        started = len(self.request_timestamps)
        window.add(LoadSample(now, (ReplicaLoad(0, started=started),)))
        current = self.state.target
        self.state = decide(self.policy, self.state, window, now, current, fleet=fleet).next_state

    def get_final_target_num_replicas(self) -> int:
        return sky_policy.final_target(self.policy, self.state.target)

    def get_decision_interval(self) -> float:
        return sky_policy.decision_interval(self.policy, self.state.target)

    def _generate_scaling_decisions(
        self, replica_infos: list[ReplicaView]
    ) -> list[AutoscalerDecision]:
        # SkyServe's instance-aware autoscaler sizes by the replicas it is given.
        self._set_target_num_replicas_with_hysteresis(
            _fleet(self.spec, replica_infos, self.latest_version)
        )
        plan = plan_steady(
            self.get_final_target_num_replicas(),
            self.latest_version,
            replica_infos,
            version_broken=False,
        )
        ups = [
            AutoscalerDecision(AutoscalerDecisionOperator.SCALE_UP, None)
            for _ in range(plan.launch)
        ]
        downs = [
            AutoscalerDecision(AutoscalerDecisionOperator.SCALE_DOWN, rid) for rid, _ in plan.drain
        ]
        return ups + downs

    def generate_scaling_decisions(
        self, replica_infos: list[ReplicaView], active_versions: list[int]
    ) -> list[AutoscalerDecision]:
        return self._generate_scaling_decisions(replica_infos)


class SkyServeController:
    """SkyServe's controller as far as its autoscaler goes: the version it serves."""

    def __init__(self, service_name: str, spec: ServiceSpec, version: int, **_: Any) -> None:
        self._autoscaler = Autoscaler.from_spec(service_name, spec)
        self._autoscaler.latest_version = version
