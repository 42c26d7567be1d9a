"""One service's autoscaler: the pure policy, fed with the load window and a clock.

The runtime asks :meth:`Autoscaler.target` for the number of replicas to run
(the planner sizes steady state and updates to it), calls :meth:`step` once per
reconcile tick with the number of replicas serving, and :meth:`request_waiting`
when its load balancer holds a request at zero replicas. Every change of the
target is recorded (``record``) with its reason; the latest judgement, changed
or not, is what ``status`` shows.

A Ray policy with a custom ``policy_function`` has it called in a subprocess
(controller/policy_runner.py) with Ray's context; its answer replaces Ray's
default policy's desired count, and Ray's scaling factors, delays and bounds
apply to it. While the function fails or times out the target stays where it
is, and each new reason is an event.

The state is not stored: a controller that restarts starts from the replicas
that run (within the policy's bounds), so a restart neither scales a busy
service down to its minimum nor up to its initial count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from steadyserve.controller.load import ServiceLoad
from steadyserve.controller.policy_runner import PolicyRunner
from steadyserve.controller.routing import replica_accelerator
from steadyserve.core.autoscale import (
    Decision,
    FixedPolicy,
    OngoingPolicy,
    Policy,
    QpsPolicy,
    ScaleState,
    decide,
    mean_ongoing,
    qps,
    request_waiting_at_zero,
)
from steadyserve.core.autoscale.context import context_fields
from steadyserve.core.autoscale.instance_aware import FleetReplica, capacity
from steadyserve.core.autoscale.policies import QPS_WINDOW_S, clip
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ServiceSpec
from steadyserve.spec.autoscaling import policy_for
from steadyserve.store import ReplicaRow


def policy_name(policy: Policy) -> str:
    """``fixed``, ``qps`` (SkyServe's) or ``ongoing_requests`` (Ray Serve's)."""
    if isinstance(policy, QpsPolicy):
        return "qps"
    if isinstance(policy, OngoingPolicy):
        return "ongoing_requests"
    return "fixed"


def policy_label(policy: Policy) -> str:
    """One short line for the status table, e.g. ``ongoing 1/replica [1..3]``."""
    if isinstance(policy, QpsPolicy) and policy.targets is not None:
        what = "qps " + ", ".join(f"{k} {v:g}" for k, v in policy.per_accelerator) + "/replica"
    elif isinstance(policy, QpsPolicy):
        what = f"qps {policy.target_qps_per_replica:g}/replica"
    elif isinstance(policy, OngoingPolicy):
        what = f"ongoing {policy.target_ongoing_requests:g}/replica"
    else:
        return f"fixed {policy.replicas}"
    return f"{what} [{policy.min_replicas}..{policy.max_replicas}]"


SIZED_STATES = frozenset(
    {ReplicaStatus.PENDING, ReplicaStatus.PROVISIONING, ReplicaStatus.STARTING, ReplicaStatus.READY}
)
"""The replicas whose capacity a per-accelerator target counts (SkyServe's
PROVISIONING, STARTING and READY; PENDING waits here for a GPU, as a cloud
replica waits while it provisions). A NOT_READY replica carries nothing."""


def fleet_of(spec: ServiceSpec, replicas: Iterable[ReplicaRow], version: int) -> list[FleetReplica]:
    """The replicas of ``version`` that count, and the accelerator each holds (the
    GPU inventory's assignment, else the spec's first choice): what a
    per-accelerator target sizes the service by."""
    return [
        FleetReplica(replica_accelerator(spec, r), r.status is ReplicaStatus.READY)
        for r in replicas
        if r.status in SIZED_STATES and r.version == version
    ]


def capacities_of(spec: ServiceSpec, replicas: Iterable[ReplicaRow]) -> dict[int, float]:
    """What each replica carries under a per-accelerator target (empty without one):
    the planner stops the smaller first when the target drops."""
    policy = policy_for(spec.service)
    targets = policy.targets if isinstance(policy, QpsPolicy) else None
    if targets is None:
        return {}
    return {r.id: capacity(targets, replica_accelerator(spec, r)) for r in replicas}


def _span(policy: Policy) -> float:
    return policy.window_s if not isinstance(policy, FixedPolicy) else QPS_WINDOW_S


class Autoscaler:
    """The target replica count of one service, and why."""

    def __init__(
        self,
        policy: Policy,
        running: int | None,
        record: Callable[[str], None],
        name: str = "",
        policy_workdir: Callable[[], Path] | None = None,
    ) -> None:
        """``running``: live replicas of the current version found at start (None or
        0 for a new service, which starts at the policy's initial count).
        ``policy_workdir``: where a custom policy function is imported from (the
        current version's workdir)."""
        self.policy = policy
        start = clip(running, policy) if running else policy.initial
        self.state = ScaleState(target=start)
        self.load = ServiceLoad(_span(policy))
        self._record = record
        self._name = name
        self._policy_workdir = policy_workdir
        self._runner: PolicyRunner | None = None
        self._custom: float | None = None
        self._policy_state: dict[str, Any] = {}
        self._policy_error: str | None = None
        self.last: Decision | None = None
        self.last_change: str | None = None
        self.limit: int | None = None
        """The most that fits on this machine now (controller/capacity.py), when
        that is below the policy's target; None: no cap."""

    def target(self) -> int:
        """The replicas to run: the target, plus SkyServe's ``num_overprovision``,
        capped at what fits on the machine (``cap``)."""
        target = self.state.target
        if isinstance(self.policy, QpsPolicy):
            target += self.policy.num_overprovision
        if self.limit is not None and self.scales:
            return min(target, self.limit)
        return target

    def cap(self, limit: int | None, why: str | None) -> None:
        """Cap the target at what fits (None lifts the cap); a new cap is recorded
        with what the machine lacks, so a target that cannot be reached says why
        rather than leaving replicas PENDING for ever."""
        if limit == self.limit:
            return
        self.limit = limit
        if limit is not None and self.scales:
            reason = f"target {self.state.target} capped at {limit}: what fits on this machine"
            self.last_change = reason + (f" ({why})" if why else "")
            self._record(self.last_change)

    @property
    def scales(self) -> bool:
        """Whether a policy drives the count (rather than a fixed size)."""
        return not isinstance(self.policy, FixedPolicy)

    @property
    def policy_name(self) -> str:
        return policy_name(self.policy)

    @property
    def allows_zero(self) -> bool:
        return self.scales and self.policy.min_replicas == 0

    def set_policy(self, policy: Policy) -> None:
        """Apply a changed policy in place; running replicas stay, the bounds apply at
        the next step (a target outside them moves to the nearest bound)."""
        if policy == self.policy:
            return
        self.policy = policy
        self.load.resize(_span(policy))
        if isinstance(policy, FixedPolicy):
            self.state = ScaleState(policy.replicas)

    def step(
        self,
        now: float,
        serving: int,
        running_ids: list[int] | None = None,
        fleet: Sequence[FleetReplica] = (),
    ) -> Decision:
        """One decision at ``now`` with ``serving`` replicas routable; ``fleet``: the
        current version's live replicas and their accelerators (a per-accelerator
        target sizes by their capacity)."""
        policy = self.policy
        if isinstance(policy, OngoingPolicy) and policy.policy_function is not None:
            held = self._ask_custom(policy, now, serving, running_ids or [])
            if held is not None:
                self._take(held)
                return held
        else:
            self.close()
        decision = decide(
            policy, self.state, self.load.window, now, serving, self._custom, fleet=fleet
        )
        self._take(decision)
        return decision

    def _ask_custom(
        self, policy: OngoingPolicy, now: float, serving: int, running_ids: list[int]
    ) -> Decision | None:
        """Take the custom policy's latest answer and ask again; a Decision that
        keeps the target when there is no usable answer, else None."""
        assert policy.policy_function is not None
        workdir = self._policy_workdir() if self._policy_workdir else Path.cwd()
        runner = self._runner
        if runner is None or (runner.import_path, runner.workdir) != (
            policy.policy_function,
            workdir,
        ):
            self.close()
            runner = self._runner = PolicyRunner(policy.policy_function, workdir)
        answer = runner.take()
        if answer is not None:
            if answer.error is not None:
                self._custom = None
                if answer.error != self._policy_error:
                    target = self.state.target
                    self._record(f"custom policy: {answer.error}; keeping {target} replicas")
                self._policy_error = answer.error
            else:
                self._custom, self._policy_state = answer.desired, answer.policy_state
                self._policy_error = None
        samples = self.load.window.between(now - policy.window_s, now)
        runner.submit(
            context_fields(
                policy,
                name=self._name,
                current=serving,
                target=self.state.target,
                running=running_ids,
                total=mean_ongoing(samples),
                queued=sum(s.queued for s in samples) / len(samples) if samples else 0.0,
                policy_state=self._policy_state,
                now=now,
            )
        )
        if self._custom is not None:
            return None
        target = self.state.target
        why = self._policy_error or f"waiting for {policy.policy_function}'s first answer"
        return Decision(
            target, f"custom policy: {why}; keeping {target} replicas", self.state, target
        )

    def close(self) -> None:
        """Stop the custom policy's subprocess, if any."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()
            self._custom = None

    def request_waiting(self, now: float) -> Decision:
        """The load balancer holds a request and nothing serves: scale from zero at once."""
        if not self.scales:
            return Decision(self.state.target, "fixed size", self.state, self.state.target)
        decision = request_waiting_at_zero(self.policy, self.state)
        self._take(decision)
        return decision

    def _take(self, decision: Decision) -> None:
        self.state = decision.next_state
        if decision.decided or self.last is None:
            self.last = decision  # between SkyServe's decisions, the last one stands
        if decision.changed and self.scales:
            self.last_change = decision.reason
            self._record(decision.reason)

    def status_json(self, now: float) -> dict[str, Any]:
        """``autoscaling`` in ``status --json``: the policy, the load now, the decisions."""
        span = _span(self.policy)
        samples = self.load.window.between(now - span, now)
        return {
            "policy": policy_name(self.policy),
            "label": policy_label(self.policy),
            "min_replicas": self.policy.min_replicas,
            "max_replicas": self.policy.max_replicas,
            "current_qps": round(qps(samples, span), 3),
            "current_ongoing": round(mean_ongoing(samples), 3),
            "last_decision": self.last.reason if self.last is not None else None,
            "last_change": self.last_change,
        }
