"""One autoscaling step: (policy, state, load window, now) -> a decision and the next state.

The controller keeps a :class:`ScaleState` per service and calls :func:`decide`
on every tick with the time it read and the number of replicas serving; the
function reads no clock and keeps nothing, so a test can drive hours of
simulated traffic in microseconds. Every decision carries a one-line reason
(``ongoing 5.8 over 3 s / target 1 -> 3 replicas``) that becomes the event.

The delays are the peers' own. Ray Serve's policy (ray_policy.py) is judged on
every tick: a wish to scale up (or down) must hold on the clock for
``upscale_delay_s`` (``downscale_delay_s``) before the target moves, and a wish
that lapses, even for one tick, starts its delay again. SkyServe's
(sky_policy.py) is judged once a decision interval and counts consecutive
decisions. Either way the downscale delay being the longer is the hysteresis
that keeps a load at a boundary from flapping the target.

Burst mode (Knative calls it panic mode) is ours, on request (``burst: true``):
when the load over a tenth of the policy's window exceeds twice what the
serving replicas are meant to carry, the target jumps at once to what that
short-window load asks for, skipping the upscale delay; and for one full window
after the last such moment the target never goes down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from steadyserve.core.autoscale.instance_aware import FleetReplica, capacity, needed
from steadyserve.core.autoscale.policies import (
    BURST_FRACTION,
    BURST_RATIO,
    FixedPolicy,
    OngoingPolicy,
    Policy,
    QpsPolicy,
    clip,
)
from steadyserve.core.autoscale.ray_policy import RayDelay, policy_step
from steadyserve.core.autoscale.signals import LoadWindow, mean_ongoing, qps
from steadyserve.core.autoscale.sky_policy import SkyCounts, decision_interval, hysteresis

__all__ = ["Decision", "ScaleState", "decide", "initial_state", "request_waiting_at_zero"]


@dataclass(frozen=True)
class ScaleState:
    """What the autoscaler remembers between ticks (store it; it is plain data)."""

    target: int
    """The replica count the service should run now."""
    up_since: float | None = None
    """Since when the load has, without a break, asked for more than ``target``."""
    down_since: float | None = None
    """Since when the load has, without a break, asked for fewer than ``target``."""
    burst_until: float | None = None
    """Burst mode lasts until this time: no scaling down before it."""
    up_count: int = 0
    """SkyServe: consecutive decisions that wanted more than ``target``."""
    down_count: int = 0
    """SkyServe: consecutive decisions that wanted fewer than ``target``."""
    next_at: float | None = None
    """SkyServe: the time of the next decision (None: decide now)."""

    def in_burst(self, now: float) -> bool:
        return self.burst_until is not None and now < self.burst_until


@dataclass(frozen=True)
class Decision:
    """The outcome of one step. ``changed`` decisions are the ones worth an event."""

    target: int
    reason: str
    next_state: ScaleState
    """What to remember until the next step (pass it back as ``state``)."""
    previous: int
    """The target before this step."""
    qps: float | None = None
    """Requests per second over the policy's window (None where not measured)."""
    ongoing: float | None = None
    """Ongoing requests (running plus queued) averaged over the policy's window."""
    burst: bool = False
    """Burst mode is on after this step."""
    decided: bool = True
    """False between SkyServe's decisions (the step only waited for the next one)."""

    @property
    def changed(self) -> bool:
        return self.target != self.previous


def initial_state(policy: Policy) -> ScaleState:
    """The state of a freshly deployed service: Ray's ``initial_replicas``, else the minimum."""
    return ScaleState(target=policy.initial)


def _replicas(count: int) -> str:
    return f"{count} replica" if count == 1 else f"{count} replicas"


def _secs(seconds: float) -> str:
    """A duration as people read it: one decimal under 10 s, whole seconds above
    (``7.5``, ``29``, ``600``), never the float's six digits (``29.2341``)."""
    if abs(seconds) < 10:
        return f"{seconds:.1f}".removesuffix(".0")
    return f"{seconds:.0f}"


def _num(value: float) -> str:
    if value == 0 or abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.2g}"


@dataclass(frozen=True)
class _Reading:
    """The load as one policy sees it, and how to say it."""

    metric: str
    value: float
    period: float
    per_replica: float
    fleet: tuple[int, float] | None = None
    """Sized by capacity (a per-accelerator target): the live replicas and the
    requests per second they carry together."""
    need: int | None = None
    """What the capacity rule asks for, before bounds (with ``fleet``)."""

    def says(self, count: int) -> str:
        if self.fleet is not None:
            live, carried = self.fleet
            against = f"capacity {carried:g} of {_replicas(live)}"
        else:
            against = f"target {self.per_replica:g}"
        return (
            f"{self.metric} {_num(self.value)} over {_secs(self.period)} s"
            f" / {against} -> {_replicas(count)}"
        )

    def needs(self) -> int:
        """Replicas that carry this load at the target, before bounds."""
        if self.need is not None:
            return self.need
        return math.ceil(self.value / self.per_replica)


def _qps_reading(
    policy: QpsPolicy, rate: float, period: float, fleet: Sequence[FleetReplica]
) -> _Reading:
    """The request rate against one target, or against the fleet's capacity."""
    targets = policy.targets
    if targets is None:
        return _Reading("qps", rate, period, policy.target_qps_per_replica)
    carried = sum(capacity(targets, r.accelerator) for r in fleet)
    return _Reading(
        "qps",
        rate,
        period,
        policy.target_qps_per_replica,
        fleet=(len(fleet), carried),
        need=needed(targets, rate, fleet),
    )


def _bounds_note(policy: Policy, reading: _Reading, count: int) -> str:
    if count == policy.max_replicas and reading.needs() > count:
        return f" (max_replicas {policy.max_replicas})"
    if count == policy.min_replicas and reading.needs() < count:
        return f" (min_replicas {policy.min_replicas})"
    return ""


def decide(
    policy: Policy,
    state: ScaleState,
    window: LoadWindow,
    now: float,
    current_replicas: int,
    custom_desired: float | None = None,
    fleet: Sequence[FleetReplica] = (),
) -> Decision:
    """The target for ``now``, given the samples in ``window`` and the number of
    replicas serving (READY) now. ``custom_desired``: what Ray's custom policy
    function answered, in place of Ray's default policy. ``fleet``: the live
    replicas of the current version and their accelerators, which a
    per-accelerator target sizes by. Pure: same inputs, same decision."""
    previous = state.target
    if isinstance(policy, FixedPolicy):
        reason = f"fixed size -> {_replicas(policy.replicas)}"
        return Decision(policy.replicas, reason, ScaleState(policy.replicas), previous)

    if not policy.min_replicas <= state.target <= policy.max_replicas:
        target = clip(state.target, policy)
        bound = "min_replicas" if target == policy.min_replicas else "max_replicas"
        reason = f"{bound} is {target} -> {_replicas(target)}"
        return Decision(target, reason, ScaleState(target), previous)

    span = policy.window_s
    samples = window.between(now - span, now)
    if not samples:
        reason = f"no load reports in the last {_secs(span)} s; holding {_replicas(previous)}"
        held = replace(state, up_since=None, down_since=None, up_count=0, down_count=0)
        return Decision(previous, reason, held, previous)

    short_span = span * BURST_FRACTION
    short = window.between(now - short_span, now)
    ongoing = mean_ongoing(samples)
    if isinstance(policy, QpsPolicy):
        rate = qps(samples, span)
        reading = _qps_reading(policy, rate, span, fleet)
        burst_reading = _qps_reading(policy, qps(short, short_span), short_span, fleet)
        measured_qps: float | None = rate
    else:
        reading = _Reading("ongoing", ongoing, span, policy.target_ongoing_requests)
        burst_reading = _Reading("ongoing", mean_ongoing(short), short_span, reading.per_replica)
        measured_qps = None

    # Burst (on request): short-window load over twice what the serving replicas carry.
    burst_until = state.burst_until
    if policy.burst:
        carried = current_replicas * reading.per_replica
        if isinstance(policy, QpsPolicy) and policy.targets is not None:
            serving = [r for r in fleet if r.ready]
            carried = sum(capacity(policy.targets, r.accelerator) for r in serving)
        if short and burst_reading.value > BURST_RATIO * carried:
            burst_until = now + span
            burst_target = clip(burst_reading.needs(), policy)
            if burst_target > previous:
                reason = "burst: " + burst_reading.says(burst_target)
                reason += _bounds_note(policy, burst_reading, burst_target)
                step = _Step(state, now, reading, ongoing, measured_qps, burst_until)
                return step.decision(
                    burst_target, reason, ScaleState(burst_target, burst_until=burst_until)
                )
    step = _Step(state, now, reading, ongoing, measured_qps, burst_until)
    if isinstance(policy, QpsPolicy):
        return _skyserve(policy, step)
    return _ray_serve(policy, step, current_replicas, custom_desired)


@dataclass(frozen=True)
class _Step:
    """One step's inputs once the load is read: what each peer's policy decides from."""

    state: ScaleState
    now: float
    reading: _Reading
    ongoing: float
    measured_qps: float | None
    burst_until: float | None

    @property
    def previous(self) -> int:
        return self.state.target

    @property
    def bursting(self) -> bool:
        return self.burst_until is not None and self.now < self.burst_until

    def decision(
        self, target: int, reason: str, next_state: ScaleState, decided: bool = True
    ) -> Decision:
        return Decision(
            target,
            reason,
            next_state,
            self.previous,
            qps=self.measured_qps,
            ongoing=self.ongoing,
            burst=next_state.in_burst(self.now),
            decided=decided,
        )

    def burst_holds(self, wanted: int) -> str:
        return (
            f"holding {_replicas(self.previous)}: {self.reading.says(wanted)}, but burst mode"
            f" forbids scaling down for {_secs(self.burst_until - self.now)} s"  # type: ignore[operator]
        )


def _skyserve(policy: QpsPolicy, step: _Step) -> Decision:
    """SkyServe's policy: judged once a decision interval, counting consecutive
    decisions that want more (or fewer) replicas (sky_policy.py)."""
    state, now, reading, previous = step.state, step.now, step.reading, step.previous
    if state.next_at is not None and now < state.next_at:
        reason = f"next decision in {_secs(state.next_at - now)} s"
        return step.decision(previous, reason, replace(state, burst_until=step.burst_until), False)
    counts = SkyCounts(state.up_count, state.down_count)
    sky = hysteresis(policy, previous, counts, clip(reading.needs(), policy))
    if sky.desired < previous and step.bursting:
        sky = replace(sky, target=previous, counts=SkyCounts(), needed=0)
        reason = step.burst_holds(sky.desired)
    elif sky.target != previous:
        reason = reading.says(sky.target) + _bounds_note(policy, reading, sky.target)
        if previous == 0:
            reason += " (from zero)"
    elif sky.needed:
        made = max(sky.counts.up, sky.counts.down)
        way = "upscale" if sky.counts.up else "downscale"
        delay = policy.upscale_delay_seconds if sky.counts.up else policy.downscale_delay_seconds
        reason = (
            f"holding {_replicas(previous)}: {reading.says(sky.desired)} on {made} of"
            f" {sky.needed} decisions ({_secs(delay)} s {way} delay)"
        )
    else:
        reason = f"steady: {reading.says(previous)}"
    next_state = ScaleState(
        sky.target,
        burst_until=step.burst_until,
        up_count=sky.counts.up,
        down_count=sky.counts.down,
        next_at=now + decision_interval(policy, sky.target),
    )
    return step.decision(sky.target, reason, next_state)


def _ray_serve(
    policy: OngoingPolicy, step: _Step, current_replicas: int, custom_desired: float | None
) -> Decision:
    """Ray Serve's policy: judged every tick, a wish held on the clock for its delay
    before the target moves (ray_policy.py), or its custom policy's answer."""
    state, now, reading, previous = step.state, step.now, step.reading, step.previous
    pending = RayDelay(1, state.up_since) if state.up_since is not None else RayDelay()
    if state.down_since is not None:
        pending = RayDelay(-1, state.down_since)
    ray = policy_step(
        policy, current_replicas, step.ongoing, previous, pending, now, custom_desired
    )
    target = clip(ray.count, policy)
    wanted = clip(ray.desired, policy)
    if wanted < previous and step.bursting:
        held = ScaleState(previous, burst_until=step.burst_until)
        return step.decision(previous, step.burst_holds(wanted), held)
    if target != previous:
        reason = reading.says(target) + _bounds_note(policy, reading, target)
        if previous == 0:
            reason += " (from zero)"
    elif ray.delay.since is not None and wanted != previous:
        if ray.delay.direction > 0:
            what = "upscale delay"
        elif previous == 1 and wanted == 0:
            what = "downscale-to-zero delay"
        else:
            what = "downscale delay"
        reason = (
            f"holding {_replicas(previous)}: {reading.says(wanted)} after"
            f" {_secs(now - ray.delay.since)} of {_secs(ray.delay_s)} s {what}"
        )
    else:
        reason = f"steady: {reading.says(previous)}"
    up = ray.delay.since if ray.delay.direction > 0 else None
    down = ray.delay.since if ray.delay.direction < 0 else None
    return step.decision(target, reason, ScaleState(target, up, down, step.burst_until))


def request_waiting_at_zero(policy: Policy, state: ScaleState) -> Decision:
    """A request waits at a service scaled to zero: at least one replica, at once.

    The load balancer asks this when a request arrives and nothing serves; no
    delay applies (SkyServe and Ray Serve both scale up from zero at once).
    Ray's ``upscaling_factor`` sets how many start (at least one).
    """
    previous = state.target
    if previous >= 1:
        reason = f"request waiting; {_replicas(previous)} already wanted"
        return Decision(previous, reason, state, previous)
    if policy.max_replicas == 0:
        return Decision(0, "request waiting, but max_replicas is 0", state, previous)
    first = math.ceil(policy.up_gain) if isinstance(policy, OngoingPolicy) else 1
    target = clip(max(1, first), policy)
    reason = f"request waiting at zero -> {_replicas(target)}"
    return Decision(target, reason, ScaleState(target, burst_until=state.burst_until), previous)
