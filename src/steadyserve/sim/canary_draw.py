"""What a schedule draws for its canaries besides their steps: the new version's
nature (sim/answers.py), the analysis thresholds and the shadow policy, and a step
plan that gives the analysis or a shadow step time to judge.

Drawn from a generator of their own (seeded from the schedule's seed), after and
apart from the schedule's events: a seed draws the same events, commands and faults
as it did before canaries were judged, and only its canary updates (and the first
version's noise) gain these arguments.

Thresholds are drawn within reach of the simulated traffic (2 to 48 requests a
second; a canary's share of them for a window of 2 to 10 seconds), and out of reach
in some runs (``min_requests: 1000000``, no shadow limit), so that an analysis or a
shadow verdict can pass, fail (and abort the canary), or never judge.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

Draw = Callable[[random.Random], dict[str, Any]]

NATURES: dict[str, Draw] = {
    "alike": lambda r: {},
    "differs": lambda r: {"differ": r.choice([5, 60, 100])},
    "noisy": lambda r: {"noisy": True},
    "quiet": lambda r: {"noisy": False},
    "errors": lambda r: {"errors": r.choice([10, 40])},
}
"""How a canary's version answers next to the stable one (one line a kind): the
same, another ``$.value`` for some requests, the noise field added or dropped, 500s."""


def _shadow_plan(r: random.Random) -> list[dict[str, Any]]:
    """Mirror, then (a timed pause, until promote, or at once) the first weight."""
    hold: list[dict[str, Any]] = r.choice([[], [{"pause": r.choice([5, 10, 20])}], [{"pause": {}}]])
    return [{"shadow": r.choice([10, 50, 100])}, *hold, {"weight": r.choice([25, 50])}]


PLANS: dict[str, Callable[[random.Random], list[dict[str, Any]] | None]] = {
    "drawn": lambda r: None,  # the steps the schedule drew (sim/schedule.py)
    "shadow": _shadow_plan,
    "analysis": lambda r: [
        {"weight": r.choice([25, 50])},
        {"pause": r.choice([10, 20, 30])},
    ],
}
"""Step plans (the runner appends the last ``weight: 100``)."""


def analysis(r: random.Random) -> dict[str, Any]:
    """``service.canary.analysis``: error thresholds (or none within reach) and the
    shadow step's limits."""
    out: dict[str, Any] = {"min_shadow_compared": r.choice([5, 20, 50])}
    if r.random() < 0.25:
        out["min_requests"] = 1_000_000  # never judges, as before the load reports
    else:
        out["min_requests"] = r.choice([5, 20, 60])
        out["interval_s"] = r.choice([2, 5, 10])
        out["failure_limit"] = r.choice([1, 1, 2])
        kind = r.choice(["rate", "increase", "both"])
        if kind in ("rate", "both"):
            out["max_error_rate"] = r.choice([0.05, 0.25])
        if kind in ("increase", "both"):
            out["max_error_rate_increase"] = r.choice([0.05, 0.2])
    limit = r.choice([None, 0.02, 0.1, 0.3])
    if limit is not None:
        out["max_shadow_diff_rate"] = limit
    return out


def shadow(r: random.Random) -> dict[str, Any]:
    """``service.canary.shadow``: noise learned (or not), ``$.at`` ignored (or not)."""
    return {"noise_share": r.choice([0, 0.2, 0.5, 1]), "ignore": r.choice([[], ["$.at"]])}


def canary(r: random.Random) -> dict[str, Any]:
    """The arguments a canary update gains."""
    kind = r.choice(sorted(NATURES))
    out: dict[str, Any] = {
        "version": NATURES[kind](r),
        "analysis": analysis(r),
        "shadow": shadow(r),
    }
    plan = PLANS[r.choice(sorted(PLANS))](r)
    if plan is not None:
        out["steps"] = plan
    return out


def first_run(r: random.Random) -> str:
    """Version 1's ``run``: its answers carry the noise field in half the schedules."""
    return "serve --v0 --noisy" if r.random() < 0.5 else "serve --v0"
