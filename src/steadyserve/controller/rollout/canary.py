"""Carry out a canary update: the step machine's weight in the route table, the new
version sized to it, the analysis on the load balancers' counts, the commands.

The decisions are pure (steadyserve.core.canary, core/strategies/canary.py); this driver
feeds them the clock, the replicas and the counts, and does what they say
through the runtime: it publishes weights, plans launches and drains, records
each move and each analysis result as an event, and on an abort rolls the
service back (rollout.roll_back: the new version is FAILED, its replicas drain
in the same tick, the stable version, which kept its target throughout (a
stable replica lost meanwhile is replaced: the canary plan's ``launch_old``,
rollout.heal), takes all traffic again).

The machine's state is saved after every move in the rollout's tables of the
state database (rollout/tables.py), in the same transaction as the move's event,
so a controller killed during a canary resumes it at the same step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from steadyserve.controller.errors import BadInput
from steadyserve.controller.metrics import version_totals
from steadyserve.core.canary.analysis import Analysis, Counts, Thresholds, Verdict
from steadyserve.core.canary.steps import (
    CanaryState,
    Input,
    Phase,
    Refused,
    Step,
    move,
    new_replicas,
    start,
)
from steadyserve.core.planner import ReplicaView
from steadyserve.core.shadow.verdict import Limits as ShadowLimits
from steadyserve.core.shadow.verdict import ShadowVerdict, Tally, judge
from steadyserve.core.states import EventKind, ReplicaStatus, UpdateMode
from steadyserve.wire.counts import LATENCY_BUCKETS, TTFB_BUCKETS
from steadyserve.wire.mirror import Mirror

if TYPE_CHECKING:
    from steadyserve.controller.metrics import Traffic
    from steadyserve.controller.port import RolloutPort
    from steadyserve.controller.rollout.state import Rollout
    from steadyserve.controller.rollout.tables import CanaryTable

MODE = UpdateMode.CANARY
EVENT_STEP = EventKind.CANARY_STEP
EVENT_ANALYSIS = EventKind.CANARY_ANALYSIS
COMMANDS = {
    "promote": Input.PROMOTE,
    "promote_full": Input.PROMOTE_FULL,
    "pause": Input.PAUSE,
    "resume": Input.RESUME,
    "abort": Input.ABORT,
}


def steps_of(runtime: RolloutPort) -> list[Step]:
    """The target version's steps (``service.canary.steps``) as the machine takes them."""
    return [
        Step(weight=s.weight, pause_s=s.pause_s, shadow=s.shadow)
        for s in runtime.spec.service.canary.steps
    ]


def thresholds_of(runtime: RolloutPort) -> Thresholds:
    a = runtime.spec.service.canary.analysis
    return Thresholds(
        max_error_rate=a.max_error_rate,
        max_p99_latency_ms=a.max_p99_latency_ms,
        max_error_rate_increase=a.max_error_rate_increase,
        max_p99_ratio=a.max_p99_ratio,
        max_p99_ttfb_ms=a.max_p99_ttfb_ms,
        min_requests=a.min_requests,
        interval_s=a.interval_s,
        failure_limit=a.failure_limit,
    )


def shadow_limits_of(runtime: RolloutPort) -> ShadowLimits:
    canary = runtime.spec.service.canary
    return ShadowLimits(
        max_diff_rate=canary.analysis.max_shadow_diff_rate,
        min_compared=canary.analysis.min_shadow_compared,
        learn_noise=canary.shadow.noise_share > 0,
    )


class CanaryDriver:
    """The canary of one service's update in flight (idle when there is none)."""

    def __init__(self, runtime: RolloutPort, owner: Rollout, table: CanaryTable) -> None:
        self.rt = runtime
        self.owner = owner
        self.table = table
        self.state: CanaryState | None = None
        self._update_id: int | None = None
        self._shadowed: int | None = None  # the version the shadow counts below are of
        self.analysis: Analysis | None = None
        self.last_verdict: Verdict | None = None
        # A shadow step's counts: the load balancers' (every worker added up), and
        # what they were when the mirroring began; its last verdict.
        self.shadow_now: Tally | None = None  # None: no report since this controller began
        self.shadow_base: Tally | None = None
        self.shadow_verdict: ShadowVerdict | None = None

    @property
    def active(self) -> bool:
        update = self.owner.update
        return update is not None and update.mode is MODE and self.owner.updating

    # state ---------------------------------------------------------------
    def _current(self) -> CanaryState:
        """The state of the update in flight: loaded after a restart, or a new one."""
        update = self.owner.update
        assert update is not None and update.id is not None
        if self._update_id != update.id or self.state is None:
            self._update_id = update.id
            self.analysis = Analysis(thresholds_of(self.rt), LATENCY_BUCKETS, TTFB_BUCKETS)
            self.last_verdict = None
            # The last report's tally was the previous update's version: a base
            # taken from it would hide this version's first answers (or all).
            self.shadow_now, self.shadow_base, self.shadow_verdict = None, None, None
            self._shadowed = update.to_version
            loaded = self.table.load(update.id)
            if loaded is None:
                self.state = start(self.rt.clock.wall())
                self._record(self.state, f"canary of version {update.to_version} started")
            else:
                self.state = loaded
                self._event(
                    EVENT_STEP,
                    f"resumed at step {loaded.step + 1} (weight {loaded.weight}%, "
                    f"{loaded.phase.value.lower()})",
                )
        elif self._shadowed != update.to_version:
            # A change joined the update in place: the mirror goes to its version now,
            # whose counts start anew; the last report's tally, and a base taken from
            # it, were the version before (they would hide the new one's answers).
            self.shadow_now, self.shadow_base, self.shadow_verdict = None, None, None
            self._shadowed = update.to_version
        return self.state

    def _record(self, state: CanaryState, message: str) -> None:
        update = self.owner.update
        assert update is not None and update.id is not None
        with self.rt.store.transaction():  # the step and its event commit together
            self.table.save(update.id, self.rt.name, state)
            self._event(EVENT_STEP, message)
        self.state = state

    def _event(self, kind: EventKind, message: str) -> None:
        self.rt.store.add_event(self.rt.name, None, None, kind, message)

    def _moved(self, before: CanaryState, after: CanaryState) -> None:
        if after == before:
            return
        steps = steps_of(self.rt)
        where = (
            f"step {min(after.step + 1, len(steps))}/{len(steps)}"
            if not after.phase.is_final
            else after.phase.value.lower()
        )
        self._record(after, f"{where}: weight {after.weight}% ({after.reason})")

    # the reconcile tick ---------------------------------------------------
    def tick(self) -> None:
        """Judge, then move the machine; an abort rolls back in this same tick."""
        if not self.active:
            return
        state = self._current()
        update = self.owner.update
        assert update is not None
        if not state.phase.is_final and self.analysis is not None:
            verdict = self.analysis.check(
                self.rt.clock.now(), update.to_version, update.from_version
            )
            if verdict is not None:
                self.last_verdict = verdict
                self._event(EVENT_ANALYSIS, f"{verdict.outcome}: {_figures(verdict)}")
                if verdict.failed:
                    self._apply(Input.FAILED_ANALYSIS, f"analysis failed: {verdict.reason}")
                    return
        shadow = self._judge_shadow(state)
        if shadow is not None and shadow.outcome == "failed":
            self._apply(Input.FAILED_ANALYSIS, f"shadow analysis failed: {shadow.reason}")
            return
        self._apply(Input.TICK, shadow=None if shadow is None else shadow.outcome)

    def _judge_shadow(self, state: CanaryState) -> ShadowVerdict | None:
        """The shadow verdict on what was compared since the mirroring began (None
        while nothing is mirrored); an event each time its outcome changes."""
        if not state.mirror or state.phase.is_final:
            self.shadow_base = None
            return None
        if self.shadow_now is None:
            return None  # after a restart: counted from the first report on
        if self.shadow_base is None:
            self.shadow_base = self.shadow_now
        verdict = judge(self.shadow_now.minus(self.shadow_base), shadow_limits_of(self.rt))
        last = self.shadow_verdict
        self.shadow_verdict = verdict
        if last is None or last.outcome != verdict.outcome:
            examples = "; ".join(f"{key}: e.g. {ex}" for key, _, ex in verdict.top[:3] if ex)
            more = f" [{examples}]" if examples else ""
            self._event(EVENT_ANALYSIS, f"shadow {verdict.outcome}: {verdict.reason}{more}")
        return verdict

    def _apply(self, event: Input, reason: str = "", shadow: str | None = None) -> CanaryState:
        before = self._current()
        scaled = self._scaled(before)
        now = self.rt.clock.wall()
        steps = steps_of(self.rt)
        after = move(before, steps, event, now, scaled=scaled, reason=reason, shadow=shadow)
        self._moved(before, after)
        if after.phase is Phase.ABORTED and before.phase is not Phase.ABORTED:
            self.owner.roll_back(f"canary aborted: {after.reason}")
        return after

    def _scaled(self, state: CanaryState) -> bool:
        """Whether the new version has the READY replicas the weight needs."""
        update = self.owner.update
        assert update is not None
        ready = sum(
            1
            for r in self.rt.replicas.values()
            if r.version == update.to_version and r.status == ReplicaStatus.READY
        )
        return ready >= new_replicas(self.rt.target_replicas(), max(state.weight, state.mirror))

    def options(self, target: int, version: int, views: Sequence[ReplicaView]) -> dict[str, Any]:
        """The canary step's fields of the UpdateStep: how many new replicas its weight
        needs, and whether it is complete or aborted."""
        state = self._current()
        return {
            "new_count": new_replicas(target, max(state.weight, state.mirror)),
            "complete": state.phase is Phase.COMPLETE,
            "aborted": state.phase is Phase.ABORTED,
        }

    # the load balancer -----------------------------------------------------
    def route_fields(
        self, routable: frozenset[int]
    ) -> tuple[frozenset[int], tuple[tuple[int, int], ...], tuple[int, int] | None]:
        """What the route table adds for a canary or a blue-green preview: the
        replicas to list (a preview lists the new version's READY replicas, at
        weight 0 for ordinary requests), the weights (version, percent) and the
        preview (port, version)."""
        if self.active:
            return routable, self.weights(routable), None
        preview = self.owner.blue_green.preview()
        if preview is None:
            return routable, (), None
        version = preview[1]
        ready = {
            r.id
            for r in self.rt.replicas.values()
            if r.version == version and r.status == ReplicaStatus.READY
        }
        hidden = ready - routable
        if not hidden:  # switched: the new version is routed as usual
            return routable, (), preview
        counts: dict[int, int] = {}
        for r in self.rt.replicas.values():
            if r.id in routable:
                counts[r.version] = counts.get(r.version, 0) + 1
        total = sum(counts.values())
        weights = {v: max(1, round(100 * n / total)) for v, n in counts.items()}
        weights[version] = 0
        return routable | hidden, tuple(sorted(weights.items())), preview

    def weights(self, routable: frozenset[int]) -> tuple[tuple[int, int], ...]:
        """The route table's weights: the canary's share, the rest to the old versions."""
        if not self.active:
            return ()
        update = self.owner.update
        assert update is not None
        new = update.to_version
        weight = self._current().weight  # loaded first if a restart published before a tick
        if not any(r.version == new for r in self.rt.replicas.values() if r.id in routable):
            # No replica of the new version is ready yet (it starts slowly, or failed):
            # its share would find no pool and be refused, while the stable version
            # could serve it. It takes its share once a replica is routable.
            weight = 0
        old = sorted(
            {r.version for r in self.rt.replicas.values() if r.id in routable and r.version != new}
            or {update.from_version}
        )
        out = {new: weight}
        rest = 100 - weight
        for i, version in enumerate(old):
            out[version] = rest // len(old) + (1 if i < rest % len(old) else 0)
        return tuple(sorted(out.items()))

    def mirror(self) -> Mirror | None:
        """The route table's ``mirror`` while a shadow step mirrors (wire/mirror.py)."""
        if not self.active:
            return None
        state = self._current()
        if not state.mirror or state.phase.is_final:
            return None
        shadow = self.rt.spec.service.canary.shadow
        return Mirror(
            version=self._to_version(),
            percent=state.mirror,
            methods=tuple(shadow.methods),
            max_body_bytes=shadow.max_body_bytes,
            headers=tuple(shadow.headers),
            ignore=tuple(shadow.ignore),
            noise_share=shadow.noise_share,
            stream_tolerance=shadow.stream_tolerance,
        )

    def ingest(self, traffic: Traffic | None) -> None:
        """A load report arrived: add the per-version counts to the analysis window."""
        if traffic is None or not self.active or self.analysis is None:
            return
        counts = traffic.counts()
        shadow = counts.get("shadow")
        self.shadow_now = Tally.from_json(
            shadow.get(str(self._to_version())) if isinstance(shadow, dict) else None
        )
        totals = {
            int(v): Counts(t.requests, t.errors, tuple(t.buckets), tuple(t.ttfb))
            for v, t in version_totals(counts).items()
            if v.isdigit()
        }
        self.analysis.observe(self.rt.clock.now(), totals)

    # commands --------------------------------------------------------------
    def command(self, name: str) -> str:
        """``promote``, ``promote_full``, ``pause``, ``resume`` or ``abort``; BadInput
        (one line) where it does not apply."""
        event = COMMANDS[name]
        if not self.active:
            raise BadInput(f"{self.rt.name}: no canary update in progress")
        before = self._current()
        try:
            after = self._apply(event, reason=f"steady {event.value}")
        except Refused as exc:
            raise BadInput(f"{self.rt.name}: {exc}") from None
        self.rt.wake()
        if after.phase is Phase.ABORTED:
            return f"canary of version {self._to_version()} aborted; back on the stable version"
        if after.phase is Phase.COMPLETE:
            return "canary promoted: the new version takes all traffic"
        if before == after:
            return f"nothing to do: step {after.step + 1}, weight {after.weight}%"
        return f"step {after.step + 1}: weight {after.weight}% ({after.phase.value.lower()})"

    def _to_version(self) -> int:
        return self.owner.update.to_version if self.owner.update is not None else 0

    # status ------------------------------------------------------------------
    def status_json(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        steps = steps_of(self.rt)
        state = self._current()
        out: dict[str, Any] = {
            "step": min(state.step + 1, len(steps)),
            "steps": len(steps),
            "weight": state.weight,
            "mirror": state.mirror,
            "phase": state.phase.value,
            "new_replicas_wanted": new_replicas(self.rt.target_replicas(), state.weight),
        }
        if state.step < len(steps) and state.phase is Phase.RUNNING:
            pause = steps[state.step].pause_s
            if steps[state.step].weight is None and pause is not None:
                left = state.step_started + pause - self.rt.clock.wall()
                out["pause_left_s"] = round(max(0.0, left), 1)
        verdict = self.last_verdict
        if verdict is not None:
            out["analysis"] = {"outcome": verdict.outcome, "reason": verdict.reason}
        shadow = self.shadow_verdict
        if state.mirror and shadow and self.shadow_base is not None and self.shadow_now:
            since = self.shadow_now.minus(self.shadow_base)
            out["shadow"] = {
                "mirror": state.mirror,
                "mirrored": since.mirrored,
                "dropped": since.dropped,
                **shadow.to_json(),
            }
        return out


def _figures(verdict: Verdict) -> str:
    """The verdict's reason and both versions' counts in the window, for the event."""
    c, s = verdict.canary, verdict.stable
    rate = f"canary {c.requests:g} requests, {c.error_rate:.1%} failed"
    base = f"stable {s.requests:g} requests, {s.error_rate:.1%} failed"
    return f"{verdict.reason} [{rate}; {base}]"
