"""A schedule: the service a run starts with and the events it meets, drawn from a seed.

An event is ``(step, kind, args)``: plain JSON, so a schedule prints, shrinks (drop
events) and replays as it is. What each kind does is the runner's (sim/runner.py);
what kinds exist and how each is drawn is here, in tables: a new update mode, canary
step kind or fault is one entry.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from steadyserve.sim import canary_draw

Event = tuple[int, str, dict[str, Any]]
Draw = Callable[[random.Random], dict[str, Any]]

STEP_S = 0.25
"""Simulated seconds a step advances the clock (a binary fraction: steps add up exactly)."""
MIN_STEPS = 100
"""Every schedule has at least this many steps (events and ticks), and at least one
update and one fault."""

CANARY_STEPS: dict[str, Draw] = {
    "weight": lambda r: {"weight": r.choice([10, 25, 50, 75])},
    "pause": lambda r: {"pause": r.choice([1, 2, 4]) if r.random() < 0.5 else {}},
    "shadow": lambda r: {"shadow": r.choice([10, 50, 100])},
}
"""How each kind of canary step is drawn (one line a kind); a canary ends at weight 100."""

UPDATES: dict[str, Draw] = {
    "rolling": lambda r: {},
    "blue_green": lambda r: {"auto_promote": r.random() < 0.7},
    "canary": lambda r: {
        "steps": [CANARY_STEPS[r.choice(sorted(CANARY_STEPS))](r) for _ in range(r.randint(1, 3))]
    },
    "in_place": lambda r: {"refused": r.random() < 0.15},
    "replicas": lambda r: {"replicas": r.randint(1, 4)},
    "rollback": lambda r: {},
    # `steady deploy` of a fleet file: the run's service, and a second one when listed
    # (created, updated, or taken down when a later file leaves it out: sim/fleet.py).
    "fleet": lambda r: {
        "web": r.random() < 0.75,
        "replicas": r.randint(1, 2),
        "change": r.random() < 0.5,
    },
}
"""The commands that make a version, and what each draws (runner.py carries them out)."""

COMMANDS = ("promote", "pause", "resume", "abort")
"""``steady promote|pause|resume|abort``: drawn often while an update may be in flight."""

FAULTS: dict[str, Draw] = {
    "crash": lambda r: {"pick": r.randrange(8)},
    "hang": lambda r: {"pick": r.randrange(8), "for_s": r.choice([2, 5, 30])},
    "probe_fail": lambda r: {"pick": r.randrange(8), "for_s": r.choice([1, 3, 30])},
    "slow_start": lambda r: {"delay_s": r.choice([3, 6, 12])},
    "never_start": lambda r: {},
    "controller_kill": lambda r: {"at": r.randrange(40), "down_steps": r.randrange(6)},
    "lb_restart": lambda r: {},
    # A controller kill after which the state file is found empty or torn (sim/state_faults.py).
    "state_loss": lambda r: {
        "at": r.randrange(40),
        "down_steps": r.randrange(6),
        "cut": r.choice(["empty", "torn"]),
    },
    # A controller killed after a replica's process started, before its pid was recorded:
    # the next controller's orphan sweep must stop that process.
    "spawn_kill": lambda r: {"down_steps": r.randrange(6)},
}
"""The faults a schedule draws from, and their arguments."""


FIRST_RUN = "serve --v0"
"""Version 1's ``run`` unless a schedule says otherwise (its nature: sim/answers.py)."""


@dataclass
class Schedule:
    seed: int
    service: dict[str, Any]
    steps: int
    events: list[Event] = field(default_factory=list)
    run: str = FIRST_RUN
    """Version 1's ``run``: how its replicas answer (schedules kept from before
    answers were simulated have none: the default)."""

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "seed": self.seed,
            "service": self.service,
            "steps": self.steps,
            "events": [list(e) for e in self.events],
        }
        if self.run != FIRST_RUN:
            data["run"] = self.run
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        data = json.loads(text)
        events = [(int(s), str(k), dict(a)) for s, k, a in data["events"]]
        run = str(data.get("run", FIRST_RUN))
        return cls(int(data["seed"]), dict(data["service"]), int(data["steps"]), events, run)

    def with_events(self, events: list[Event]) -> Schedule:
        return Schedule(self.seed, self.service, self.steps, events, self.run)


def initial_service(r: random.Random) -> dict[str, Any]:
    """The ``service:`` section of version 1: replicas or autoscaling, surge, probe."""
    surge, unavailable = r.choice([(1, 0), (0, 1), (2, 0), (1, 1), ("100%", 0)])
    service: dict[str, Any] = {
        "readiness_probe": {"path": "/health", "initial_delay_seconds": 8, "timeout_seconds": 1},
        "health_check_period_s": 1,
        "graceful_shutdown_timeout_s": 2,
        "graceful_shutdown_wait_loop_s": STEP_S,
        "drain_timeout_s": 20,
        "update_deadline_s": 120,
        "rolling_update": {"max_surge": surge, "max_unavailable": unavailable},
        "user_config": {"v": 0},
        "reconfigure_path": "/reconfigure",
        "canary": {
            "steps": [{"weight": 50}, {"weight": 100}],
            "analysis": {"min_requests": 1_000_000},
        },
    }
    if r.random() < 0.3:
        service["replica_policy"] = {
            "min_replicas": 1,
            "max_replicas": 4,
            "target_qps_per_replica": 4,
            "upscale_delay_seconds": 2,
            "downscale_delay_seconds": 6,
        }
    else:
        service["replicas"] = r.randint(1, 4)
    return service


def draw(seed: int) -> Schedule:
    """The schedule of ``seed``: at least :data:`MIN_STEPS` steps, an update and a fault."""
    r = random.Random(seed)
    steps = MIN_STEPS + r.randrange(300)
    events: list[Event] = [(0, "load", {"per_step": r.randint(1, 6)})]
    quiet_until = 60  # version 1 comes up first (initial delay, probes)
    updates = r.randint(1, 4)
    for _ in range(updates):
        step = r.randrange(quiet_until, max(quiet_until + 1, steps - 20))
        kind = r.choice(sorted(UPDATES))
        events.append((step, "update", {"mode": kind, **UPDATES[kind](r)}))
        for _ in range(r.randrange(3)):  # commands racing the update, or coming later
            later = step + r.choice([0, 0, 1, 4, 20, 60])
            events.append(
                (later, "command", {"action": r.choice(COMMANDS), "full": r.random() < 0.3})
            )
        if r.random() < 0.2:  # another update on its heels
            other = r.choice(sorted(UPDATES))
            events.append(
                (step + r.choice([0, 1, 10]), "update", {"mode": other, **UPDATES[other](r)})
            )
        if r.random() < 0.1:  # the state file lost within a backup's period of the update
            events.append((step + r.choice([1, 2, 4, 8]), "state_loss", FAULTS["state_loss"](r)))
    for _ in range(r.randint(1, 4)):
        kind = r.choice(sorted(FAULTS))
        events.append((r.randrange(10, steps), kind, FAULTS[kind](r)))
    for _ in range(r.randrange(3)):
        events.append((r.randrange(steps), "load", {"per_step": r.randint(0, 12)}))
    events.sort(key=lambda e: e[0])
    service = initial_service(r)
    # Apart from the events' generator: the events a seed draws stay what they were.
    extra = random.Random(f"canary:{seed}")
    first_run = canary_draw.first_run(extra)
    for _, kind, args in events:
        if kind == "update" and args["mode"] == "canary":
            args.update(canary_draw.canary(extra))
    return Schedule(seed, service, steps, events, first_run)
