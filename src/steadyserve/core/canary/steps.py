"""The canary's step machine: which weight the new version gets, and when to move on.

A canary update walks ``service.canary.steps`` in order. A ``weight`` step sets
the share of traffic on the new version and is complete once the new version has
the replicas that share needs (READY); a ``pause`` step waits its seconds, or,
with no seconds (``pause: {}``), until ``steady promote``. A ``shadow`` step
mirrors a share of the requests to the new version while every client still gets
the stable answer (core/shadow/): it is complete once the new version has the
replicas that share needs; the mirroring holds through the pauses after it, and
a timed pause among them ends only on a passed shadow verdict: one still
inconclusive at the pause's end aborts the canary (a failed verdict aborts at
once, as a failed analysis does). The next ``weight`` step waits for a passed
verdict (with no pause before it, as long as that takes) and ends the mirroring. The machine is a
table of moves (:data:`MOVES`): a phase and an input give the next phase, and
every input a phase does not list is refused with a one-line reason, which the
controller hands back to the user (``steady resume`` of a running canary, say).

The state is a small frozen value the controller persists after every move, so
a restarted controller resumes at the same step; times are wall-clock seconds
(``time.time()``) for that reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class Step:
    """One step: ``weight`` percent, a pause of ``pause_s`` seconds (None: until
    promoted), or ``shadow`` percent of the requests mirrored."""

    weight: int | None = None
    pause_s: float | None = None
    shadow: int | None = None


class Phase(str, Enum):
    RUNNING = "RUNNING"
    """Working through the steps: scaling for a weight, or timing a pause."""
    WAITING = "WAITING"
    """At a ``pause: {}`` step: waits for ``steady promote``."""
    PAUSED = "PAUSED"
    """Held by ``steady pause``: no step moves until ``steady resume``."""
    COMPLETE = "COMPLETE"
    """Every step done: the new version takes all traffic, the old one drains."""
    ABORTED = "ABORTED"
    """Aborted by a failed analysis or ``steady abort``: weight 0, the new version fails."""

    @property
    def is_final(self) -> bool:
        return self in (Phase.COMPLETE, Phase.ABORTED)


class Input(str, Enum):
    TICK = "tick"
    PROMOTE = "promote"
    PROMOTE_FULL = "promote --full"
    PAUSE = "pause"
    RESUME = "resume"
    ABORT = "abort"
    FAILED_ANALYSIS = "failed analysis"


# The table of moves: what each input does in each phase. A pair that is not
# listed is refused (see refusal()); TICK is the only input a final phase takes,
# and it changes nothing there.
MOVES: dict[tuple[Phase, Input], str] = {
    (Phase.RUNNING, Input.TICK): "advance while the current step is complete",
    (Phase.RUNNING, Input.PROMOTE): "end the current pause (or go on at once) and advance",
    (Phase.RUNNING, Input.PROMOTE_FULL): "skip every remaining step: weight 100",
    (Phase.RUNNING, Input.PAUSE): "hold at the current step",
    (Phase.RUNNING, Input.ABORT): "weight 0, fail the new version",
    (Phase.RUNNING, Input.FAILED_ANALYSIS): "weight 0, fail the new version",
    (Phase.WAITING, Input.TICK): "keep waiting for promote",
    (Phase.WAITING, Input.PROMOTE): "advance past the pause",
    (Phase.WAITING, Input.PROMOTE_FULL): "skip every remaining step: weight 100",
    (Phase.WAITING, Input.PAUSE): "hold at the current step",
    (Phase.WAITING, Input.ABORT): "weight 0, fail the new version",
    (Phase.WAITING, Input.FAILED_ANALYSIS): "weight 0, fail the new version",
    (Phase.PAUSED, Input.TICK): "stay held",
    (Phase.PAUSED, Input.RESUME): "carry on; a timed pause starts its time again",
    (Phase.PAUSED, Input.PROMOTE): "carry on past the current step",
    (Phase.PAUSED, Input.PROMOTE_FULL): "skip every remaining step: weight 100",
    (Phase.PAUSED, Input.ABORT): "weight 0, fail the new version",
    (Phase.PAUSED, Input.FAILED_ANALYSIS): "weight 0, fail the new version",
    (Phase.COMPLETE, Input.TICK): "nothing",
    (Phase.ABORTED, Input.TICK): "nothing",
}


@dataclass(frozen=True)
class CanaryState:
    """Where a canary is. ``step`` is an index into the steps (len(steps) when done)."""

    step: int = 0
    weight: int = 0
    phase: Phase = Phase.RUNNING
    step_started: float = 0.0
    """When the current step began (wall clock): a timed pause ends step_started + pause_s."""
    reason: str = ""
    """Why the last move happened, for the event it records."""
    mirror: int = 0
    """Percent of the requests mirrored to the new version (a shadow step); 0: none."""

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "weight": self.weight,
            "phase": self.phase.value,
            "step_started": self.step_started,
            "reason": self.reason,
            "mirror": self.mirror,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CanaryState:
        return cls(
            step=int(data["step"]),
            weight=int(data["weight"]),
            phase=Phase(data["phase"]),
            step_started=float(data["step_started"]),
            reason=str(data.get("reason", "")),
            mirror=int(data.get("mirror", 0)),
        )


class Refused(Exception):
    """An input the current phase does not take; the message is for the user."""


def start(now: float) -> CanaryState:
    """A new canary: weight 0, at the first step."""
    return CanaryState(step=0, weight=0, phase=Phase.RUNNING, step_started=now, reason="started")


def refusal(state: CanaryState, event: Input) -> str | None:
    """Why ``event`` cannot be taken now, or None when the table lists it."""
    if (state.phase, event) in MOVES:
        return None
    if state.phase is Phase.COMPLETE:
        return f"the canary is complete; nothing to {event.value}"
    if state.phase is Phase.ABORTED:
        return f"the canary was aborted; nothing to {event.value}"
    if event is Input.RESUME:
        return "the canary is not paused"
    return f"{event.value} does not apply while the canary is {state.phase.value.lower()}"


def new_replicas(target: int, weight: int) -> int:
    """Replicas of the new version a weight needs: its share of the target, at least one."""
    if target <= 0:
        return 0
    return max(1, math.ceil(target * weight / 100))


def move(
    state: CanaryState,
    steps: Sequence[Step],
    event: Input,
    now: float,
    *,
    scaled: bool = True,
    reason: str = "",
    shadow: str | None = None,
) -> CanaryState:
    """The state after ``event`` at ``now``; raises :class:`Refused` for a pair not in MOVES.

    ``scaled`` says whether the new version has the READY replicas the current
    weight (or mirrored share) needs (a weight or shadow step is complete only
    then); ``shadow`` is the outcome of the shadow verdict while mirroring
    (``passed``, ``failed``, ``inconclusive``; None: no verdict yet).
    """
    why = refusal(state, event)
    if why is not None:
        raise Refused(why)
    if state.phase.is_final:
        return state
    if event in (Input.ABORT, Input.FAILED_ANALYSIS):
        return replace(state, weight=0, mirror=0, phase=Phase.ABORTED, reason=reason or event.value)
    if event is Input.PROMOTE_FULL:
        return replace(
            state,
            step=len(steps),
            weight=100,
            mirror=0,
            phase=Phase.COMPLETE,
            reason="promoted in full",
        )
    if event is Input.PAUSE:
        return replace(state, phase=Phase.PAUSED, reason="paused")
    if event is Input.RESUME:
        resumed = replace(state, phase=Phase.RUNNING, step_started=now, reason="resumed")
        return _advance(resumed, steps, now, scaled, shadow)
    if event is Input.PROMOTE:
        promoted = _next_step(replace(state, phase=Phase.RUNNING), steps, now, "promoted")
        # The user walks on past the current step: a shadow verdict does not stop that.
        return _advance(promoted, steps, now, scaled, "passed" if state.mirror else shadow)
    if state.phase is not Phase.RUNNING:
        return state  # a TICK while waiting or held
    return _advance(state, steps, now, scaled, shadow)


def _advance(
    state: CanaryState, steps: Sequence[Step], now: float, scaled: bool, shadow: str | None
) -> CanaryState:
    """Take every step that is complete at ``now``, in order (bounded by the step count)."""
    for _ in range(len(steps) + 1):
        if state.step >= len(steps):
            return replace(state, weight=100, mirror=0, phase=Phase.COMPLETE)
        step = steps[state.step]
        if step.shadow is not None:
            if state.mirror != step.shadow:
                # Mirror now; complete once the replicas the share needs are READY.
                return replace(state, mirror=step.shadow, step_started=now, reason="mirroring set")
            if not scaled:
                return state
            state = _next_step(state, steps, now, f"mirroring {step.shadow}%")
            continue
        if step.weight is not None:
            if state.mirror and shadow != "passed":
                return state  # clients reach the new version only after a passed verdict
            if state.weight != step.weight or state.mirror:
                # Set the weight now; the step is complete once its replicas are READY,
                # which the caller reports on a later tick. Mirroring ends here.
                return replace(
                    state, weight=step.weight, mirror=0, step_started=now, reason="weight set"
                )
            if not scaled:
                return state
            state = _next_step(state, steps, now, f"weight {step.weight} reached")
            continue
        if step.pause_s is None:
            return replace(state, phase=Phase.WAITING, reason="waiting for promote")
        if now < state.step_started + step.pause_s:
            return state
        if state.mirror and shadow != "passed":
            # The shadow step's deadline: never walk on without a passed verdict.
            why = "inconclusive" if shadow is None else shadow
            return replace(
                state,
                weight=0,
                mirror=0,
                phase=Phase.ABORTED,
                reason=f"shadow verdict {why} at the end of the {step.pause_s:g}s pause",
            )
        state = _next_step(state, steps, now, f"paused {step.pause_s:g}s")
    return state


def _next_step(state: CanaryState, steps: Sequence[Step], now: float, why: str) -> CanaryState:
    done = state.step + 1 >= len(steps)
    return replace(
        state,
        step=min(state.step + 1, len(steps)),
        step_started=now,
        phase=Phase.COMPLETE if done else state.phase,
        weight=100 if done else state.weight,
        mirror=0 if done else state.mirror,
        reason=why,
    )
