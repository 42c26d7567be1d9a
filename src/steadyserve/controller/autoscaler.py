"""One service's autoscaler: the pure policy, fed with the load window and a clock.

The runtime asks :meth:`Autoscaler.target` for the number of replicas to run
(the planner sizes steady state and updates to it), calls :meth:`step` once per
reconcile tick with the number of replicas serving, and :meth:`request_waiting`
when its load balancer holds a request at zero replicas. Every change of the
target is recorded (``record``) with its reason; the latest judgement, changed
or not, is what ``status`` shows.

The state is not stored: a controller that restarts starts from the replicas
that run (within the policy's bounds), so a restart neither scales a busy
service down to its minimum nor up to its initial count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from steadyserve.controller.load import ServiceLoad
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
from steadyserve.core.autoscale.policies import QPS_WINDOW_S, clip


def policy_name(policy: Policy) -> str:
    """``fixed``, ``qps`` (SkyServe's) or ``ongoing_requests`` (Ray Serve's)."""
    if isinstance(policy, QpsPolicy):
        return "qps"
    if isinstance(policy, OngoingPolicy):
        return "ongoing_requests"
    return "fixed"


def policy_label(policy: Policy) -> str:
    """One short line for the status table, e.g. ``ongoing 1/replica [1..3]``."""
    if isinstance(policy, QpsPolicy):
        what = f"qps {policy.target_qps_per_replica:g}/replica"
    elif isinstance(policy, OngoingPolicy):
        what = f"ongoing {policy.target_ongoing_requests:g}/replica"
    else:
        return f"fixed {policy.replicas}"
    return f"{what} [{policy.min_replicas}..{policy.max_replicas}]"


def _span(policy: Policy) -> float:
    return policy.window_s if not isinstance(policy, FixedPolicy) else QPS_WINDOW_S


class Autoscaler:
    """The target replica count of one service, and why."""

    def __init__(self, policy: Policy, running: int | None, record: Callable[[str], None]) -> None:
        """``running``: live replicas of the current version found at start (None or
        0 for a new service, which starts at the policy's initial count)."""
        self.policy = policy
        start = clip(running, policy) if running else policy.initial
        self.state = ScaleState(target=start)
        self.load = ServiceLoad(_span(policy))
        self._record = record
        self.last: Decision | None = None
        self.last_change: str | None = None
        self.limit: int | None = None
        """The most that fits on this machine now (controller/capacity.py), when
        that is below the policy's target; None: no cap."""

    def target(self) -> int:
        if self.limit is not None and self.scales:
            return min(self.state.target, self.limit)
        return self.state.target

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

    def step(self, now: float, serving: int) -> Decision:
        """One decision at ``now`` with ``serving`` replicas routable."""
        decision = decide(self.policy, self.state, self.load.window, now, serving)
        self._take(decision)
        return decision

    def request_waiting(self, now: float) -> Decision:
        """The load balancer holds a request and nothing serves: scale from zero at once."""
        if not self.scales:
            return Decision(self.state.target, "fixed size", self.state, self.state.target)
        decision = request_waiting_at_zero(self.policy, self.state)
        self._take(decision)
        return decision

    def _take(self, decision: Decision) -> None:
        self.state = decision.next_state
        self.last = decision
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
