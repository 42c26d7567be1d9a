"""Deliberately broken controllers, to show the invariants can fail.

Each mutant changes one decision of the real controller (by monkeypatching, undone
after the run) and never raises; the self-check runs schedules against it until
the invariant it targets reports a violation (at most ``MAX_SCHEDULES``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from steadyserve.controller import routes
from steadyserve.controller.rollout.canary import CanaryDriver
from steadyserve.controller.rollout.state import Rollout
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.canary.steps import CanaryState, Input
from steadyserve.core.planner import Plan
from steadyserve.core.shadow.verdict import ShadowVerdict
from steadyserve.core.states import ReplicaStatus
from steadyserve.core.strategies.base import UpdateStep
from steadyserve.core.strategies.rolling import Rolling
from steadyserve.sim.schedule import Schedule
from steadyserve.store import Store

MAX_SCHEDULES = 200


def _any(schedule: Schedule) -> bool:
    return True


def _canaries(schedule: Schedule) -> list[dict[str, Any]]:
    return [a for _, k, a in schedule.events if k == "update" and a.get("mode") == "canary"]


def _draws_a_canary(schedule: Schedule) -> bool:
    """A canary update is drawn: the canary driver's decisions act in no other run."""
    return bool(_canaries(schedule))


def _draws_a_shadow_step(schedule: Schedule) -> bool:
    """A canary with a shadow step is drawn: no other run mirrors or judges a shadow
    (the service's own canary steps have none)."""
    return any("shadow" in step for a in _canaries(schedule) for step in a.get("steps", ()))


@dataclass(frozen=True)
class Mutant:
    name: str
    targets: str
    """The invariant that must catch it."""
    what: str
    patch: Callable[[], contextlib.AbstractContextManager[None]]
    reaches: Callable[[Schedule], bool] = _any
    """Whether a schedule can reach the broken decision. The self-check skips (but
    counts) the others: two in three schedules draw no canary, four in five no shadow
    step, and running them against a mutant of the canary driver cost most of its
    time and of the suite's mutant tests, for runs the same as unmutated ones."""


@contextlib.contextmanager
def _patched(owner: Any, attribute: str, value: Any) -> Iterator[None]:
    saved = owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, saved)


def _skip_drain_confirmation() -> contextlib.AbstractContextManager[None]:
    """Every replica counts as drained at once: stopped while the LB may route to it."""
    return _patched(routes.RoutePublisher, "drained", lambda self, rid, removed_in: True)


def _stop_old_before_new_ready() -> contextlib.AbstractContextManager[None]:
    """Rolling drains every old replica at once, ready new ones or not."""
    original = Rolling.plan

    def plan(self: Rolling, step: UpdateStep) -> Plan:
        plan = original(self, step)
        old = [r for r in step.replicas if r.version != step.new_version and r.status.is_live]
        drained = {rid for rid, _ in plan.drain}
        extra = tuple((r.id, "replaced") for r in old if r.id not in drained)
        routable = frozenset(i for i in plan.routable if i not in {rid for rid, _ in extra})
        return replace(plan, drain=plan.drain + extra, routable=routable)

    return _patched(Rolling, "plan", plan)


def _exceed_max_surge() -> contextlib.AbstractContextManager[None]:
    """Rolling launches one replica more than the surge allows, whenever it launches."""
    original = Rolling.plan

    def plan(self: Rolling, step: UpdateStep) -> Plan:
        plan = original(self, step)
        return replace(plan, launch=plan.launch + 1) if plan.launch else plan

    return _patched(Rolling, "plan", plan)


def _forget_on_restart() -> contextlib.AbstractContextManager[None]:
    """A restarted controller drops its highest-numbered replica from the state once
    its start is done (its process runs on, unlisted; past the orphan sweep, which
    would stop a replica the state recorded and forgot at re-adoption)."""
    from steadyserve.controller import startup

    original = startup.sweep

    async def forgetful(controller: Any, known: Any, claimed: set[int]) -> Any:
        task = await original(controller, known, claimed)
        for rt in controller.services.values():
            live = sorted(r.id for r in rt.replicas.values() if r.status.is_live)
            if live:
                replica = rt.replicas.pop(live[-1])
                for running in rt.hold(replica.id).tasks:  # its probing stops with it
                    running.cancel()
                rt.held.pop(replica.id, None)
                rt.store.remove_replica(replica, "forgotten")
        return task

    return _patched(startup, "sweep", forgetful)


def _skip_orphan_sweep() -> contextlib.AbstractContextManager[None]:
    """A starting controller forgets its orphan sweep: a process the previous one
    started and never recorded the pid of runs on, unlisted."""
    from steadyserve.controller import startup

    return _patched(startup, "reap_orphans", lambda home, claimed, known, machine: [])


def _restore_older_backup() -> contextlib.AbstractContextManager[None]:
    """Recovery puts in the older of the two backups when it is good: what the newer
    one had since is lost."""
    from steadyserve.controller import backups

    original = backups.newest_good

    def older(home: Any) -> Any:
        older = backups.generations(home)[-1]
        return older if backups.problem(older) is None else original(home)

    return _patched(backups, "newest_good", older)


def _route_under_probe_failure() -> contextlib.AbstractContextManager[None]:
    """NOT_READY replicas (failing probes) stay in the route table."""
    from steadyserve.controller import service_health as publishing

    original = publishing.__dict__["route_table"]

    def table(spec: Any, replicas: Any, routable: frozenset[int], **kw: Any) -> Any:
        rows = list(replicas)
        unready = {r.id for r in rows if r.status is ReplicaStatus.NOT_READY}
        shown = [replace(r, status=ReplicaStatus.READY) if r.id in unready else r for r in rows]
        return original(spec, shown, routable | frozenset(unready), **kw)

    return _patched(publishing, "route_table", table)


def _lose_a_write() -> contextlib.AbstractContextManager[None]:
    """The store misses the write of a replica turning NOT_READY (the runtime has it)."""
    original = Store.set_replica_status

    def write(self: Store, replica: Any, new: ReplicaStatus, reason: str, **values: Any) -> None:
        if new is ReplicaStatus.NOT_READY:
            replica.status = new  # in memory only
            return
        original(self, replica, new, reason, **values)

    return _patched(Store, "set_replica_status", write)


def _never_finish() -> contextlib.AbstractContextManager[None]:
    """A converged update is never recorded as ended (it stays IN_PROGRESS)."""
    return _patched(Rollout, "finish", lambda self, status, message: None)


def _illegal_move() -> contextlib.AbstractContextManager[None]:
    """A replica whose probes fail three times is recorded READY -> FAILED_INITIAL_DELAY
    (a move the table refuses), with the controller's own check switched off."""
    from steadyserve.controller import runtime as runtime_module

    original = ServiceRuntime.mark_failed

    def mark_failed(self: ServiceRuntime, replica: Any, status: ReplicaStatus, reason: str) -> None:
        if status is ReplicaStatus.FAILED_PROBING:
            status = ReplicaStatus.FAILED_INITIAL_DELAY
        original(self, replica, status, reason)

    @contextlib.contextmanager
    def both() -> Iterator[None]:
        with (
            _patched(runtime_module, "check_move", lambda old, new: None),
            _patched(ServiceRuntime, "mark_failed", mark_failed),
        ):
            yield

    return both()


def _skip_shadow_verdict() -> contextlib.AbstractContextManager[None]:
    """A shadow step's verdict is never judged: whatever was compared passes."""
    original = CanaryDriver._judge_shadow

    def judged(self: CanaryDriver, state: CanaryState) -> ShadowVerdict | None:
        verdict = original(self, state)
        if verdict is None:
            return None
        return ShadowVerdict("passed", "not judged", verdict.compared, verdict.differed)

    return _patched(CanaryDriver, "_judge_shadow", judged)


def _stale_shadow_base() -> contextlib.AbstractContextManager[None]:
    """The defect fixed in afd49b5: a new canary keeps the previous update's last
    shadow counts, so its first verdict's base is another version's tally."""
    original = CanaryDriver._current

    def current(self: CanaryDriver) -> CanaryState:
        kept, before = self.shadow_now, self._update_id
        state = original(self)
        if self._update_id != before:
            self.shadow_now = kept
        return state

    return _patched(CanaryDriver, "_current", current)


def _shadow_share_to_clients() -> contextlib.AbstractContextManager[None]:
    """A shadow step's share is routed to clients (as a weight) besides mirrored."""
    original = CanaryDriver.weights

    def weights(self: CanaryDriver, routable: frozenset[int]) -> tuple[tuple[int, int], ...]:
        out = dict(original(self, routable))
        state, update = self.state, self.owner.update
        if not out or state is None or update is None or not state.mirror or state.weight:
            return tuple(sorted(out.items()))
        share = state.mirror
        rest = {v: w * (100 - share) // 100 for v, w in out.items() if v != update.to_version}
        return tuple(sorted({**rest, update.to_version: share}.items()))

    return _patched(CanaryDriver, "weights", weights)


def _ignore_failed_analysis() -> contextlib.AbstractContextManager[None]:
    """A failed verdict is recorded, and the canary goes on as if it had passed."""
    original = CanaryDriver._apply

    def apply(
        self: CanaryDriver, event: Input, reason: str = "", shadow: str | None = None
    ) -> CanaryState:
        if event is Input.FAILED_ANALYSIS:
            event, reason = Input.TICK, ""
        return original(self, event, reason, shadow)

    return _patched(CanaryDriver, "_apply", apply)


MUTANTS = (
    Mutant(
        "skip-drain-confirmation",
        "drain",
        "stop a replica before the LB confirmed its drain",
        _skip_drain_confirmation,
    ),
    Mutant(
        "stop-old-before-new-ready",
        "availability",
        "a rolling update drains old replicas before new ones are ready",
        _stop_old_before_new_ready,
    ),
    Mutant(
        "exceed-max-surge", "surge", "a rolling update launches past max_surge", _exceed_max_surge
    ),
    Mutant(
        "forget-replica-on-restart",
        "ends",
        "a restarted controller forgets a replica",
        _forget_on_restart,
    ),
    Mutant(
        "skip-orphan-sweep",
        "ends",
        "a starting controller does not sweep the orphans a killed one left",
        _skip_orphan_sweep,
    ),
    Mutant(
        "restore-older-backup",
        "recovery",
        "a lost state is restored from the older backup",
        _restore_older_backup,
    ),
    Mutant(
        "route-under-probe-failure",
        "routing",
        "replicas failing probes stay routed",
        _route_under_probe_failure,
    ),
    Mutant(
        "lose-a-state-write",
        "agreement",
        "a replica's state change never reaches the store",
        _lose_a_write,
    ),
    Mutant(
        "never-finish-updates",
        "ends",
        "a converged update is never recorded as ended",
        _never_finish,
    ),
    Mutant("illegal-move", "moves", "a replica moves READY -> FAILED_INITIAL_DELAY", _illegal_move),
    Mutant(
        "skip-shadow-verdict",
        "shadow",
        "a shadow step passes whatever its compared answers say",
        _skip_shadow_verdict,
        _draws_a_shadow_step,
    ),
    Mutant(
        "stale-shadow-base",
        "shadow",
        "a canary's shadow counts start from the previous update's (afd49b5 reverted)",
        _stale_shadow_base,
        _draws_a_shadow_step,
    ),
    Mutant(
        "shadow-share-to-clients",
        "shadow",
        "a shadow step's share is routed to clients too",
        _shadow_share_to_clients,
        _draws_a_shadow_step,
    ),
    Mutant(
        "ignore-failed-analysis",
        "analysis",
        "a failed canary verdict is recorded but the canary goes on",
        _ignore_failed_analysis,
        _draws_a_canary,
    ),
)
