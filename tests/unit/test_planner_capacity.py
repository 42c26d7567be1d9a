"""The planner on a machine with finite GPUs: every rolling and canary update walked
to its end on simulated machines, from exactly full to roomy.

Each round plans with the room the machine has (free GPUs / GPUs per replica),
carries the plan out (drained replicas keep their GPUs until the next round,
when they have stopped; launched ones take theirs at once and are READY the
next round), and checks what a user would: the GPUs are never oversubscribed,
serving capacity never drops by more than one replica, and the update ends.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from tests.helpers.update_plans import plan_canary, plan_update

from steadyserve.core.planner import ReplicaView
from steadyserve.core.states import ReplicaStatus, UpdateMode

R = ReplicaStatus
ROUNDS = 200


@dataclass
class Machine:
    gpus: int
    per_replica: int
    replicas: dict[int, ReplicaView] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    notes: list[str] = field(default_factory=list)

    def held(self) -> int:
        holding = [
            r for r in self.replicas.values() if r.status.is_live or r.status is R.SHUTTING_DOWN
        ]
        return len(holding) * self.per_replica

    def room(self) -> int:
        return (self.gpus - self.held()) // self.per_replica

    def start(self, version: int, count: int) -> None:
        for _ in range(count):
            rid = next(self.ids)
            self.replicas[rid] = ReplicaView(rid, version, R.PENDING)
        assert self.held() <= self.gpus, "launched beyond the GPUs the machine has"

    def advance(self) -> None:
        """A round passes: stopped replicas are gone, started ones are READY."""
        for rid, r in list(self.replicas.items()):
            if r.status is R.SHUTTING_DOWN:
                del self.replicas[rid]
            elif r.status is R.PENDING:
                self.replicas[rid] = ReplicaView(rid, r.version, R.READY)

    def drain(self, ids: list[int]) -> None:
        for rid in ids:
            r = self.replicas[rid]
            self.replicas[rid] = ReplicaView(rid, r.version, R.SHUTTING_DOWN)

    def ready(self, version: int | None = None) -> int:
        return sum(
            1
            for r in self.replicas.values()
            if r.status is R.READY and (version is None or r.version == version)
        )


def full_of_old(target: int, per_replica: int, spare: int) -> Machine:
    machine = Machine(gpus=target * per_replica + spare, per_replica=per_replica)
    machine.start(1, target)
    machine.advance()
    return machine


@pytest.mark.parametrize("target", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("per_replica", [1, 2, 3])
@pytest.mark.parametrize("spare_replicas", [0, 1, 2])
@pytest.mark.parametrize(
    ("max_surge", "max_unavailable"), [(0, 0), (1, 0), (99, 0), (0, 1), (2, 1)]
)
def test_rolling_fits_the_machine_and_finishes(
    target: int, per_replica: int, spare_replicas: int, max_surge: int, max_unavailable: int
) -> None:
    machine = full_of_old(target, per_replica, spare_replicas * per_replica)
    lowest_ready = target
    for _ in range(ROUNDS):
        step = plan_update(
            UpdateMode.ROLLING,
            target,
            2,
            list(machine.replicas.values()),
            max_surge=max_surge,
            max_unavailable=max_unavailable,
            room=machine.room(),
        )
        if step.done:
            break
        if step.note:
            machine.notes.append(step.note)
        machine.drain([rid for rid, _ in step.drain])
        lowest_ready = min(lowest_ready, sum(1 for r in step.routable))
        machine.start(2, step.launch)
        machine.advance()
    else:
        pytest.fail("the rolling update never finished")
    assert machine.ready(2) == target and machine.ready(1) == 0
    # Kubernetes' rule, with a full machine forcing one unavailable when surge is 0.
    allowed = max(max_unavailable, 1 if min(max_surge, spare_replicas) == 0 else 0)
    assert lowest_ready >= target - allowed
    if spare_replicas == 0 and max_surge > 0:
        assert any("no room on this machine for a surge" in n for n in machine.notes)
    if spare_replicas >= max_surge:
        assert machine.notes == []  # the machine changed nothing


def test_a_full_machine_goes_one_replica_at_a_time() -> None:
    """The issue's case: 4 replicas x A100:2 on 8 GPUs, default surge 100%."""
    machine = full_of_old(4, 2, 0)
    views = list(machine.replicas.values())
    step = plan_update(
        UpdateMode.ROLLING, 4, 2, views, max_surge=4, max_unavailable=0, room=machine.room()
    )
    assert step.launch == 0 and len(step.drain) == 1 and len(step.routable) == 3
    assert step.note is not None and "drains and stops before a new one starts" in step.note
    machine.drain([rid for rid, _ in step.drain])
    # Still stopping: its GPUs are not free yet, so nothing starts and nothing more drains.
    step = plan_update(
        UpdateMode.ROLLING,
        4,
        2,
        list(machine.replicas.values()),
        max_surge=4,
        max_unavailable=0,
        room=machine.room(),
    )
    assert step.launch == 0 and step.drain == ()
    machine.advance()
    step = plan_update(
        UpdateMode.ROLLING,
        4,
        2,
        list(machine.replicas.values()),
        max_surge=4,
        max_unavailable=0,
        room=machine.room(),
    )
    assert step.launch == 1 and step.drain == ()


def test_without_a_room_limit_the_plan_is_what_it_was() -> None:
    machine = full_of_old(4, 2, 0)
    step = plan_update(
        UpdateMode.ROLLING, 4, 2, list(machine.replicas.values()), max_surge=4, max_unavailable=0
    )
    assert step.launch == 4 and step.drain == () and step.note is None


def test_blue_green_never_launches_beyond_the_room() -> None:
    machine = full_of_old(4, 2, 4)  # room for 2 more replicas
    step = plan_update(
        UpdateMode.BLUE_GREEN,
        4,
        2,
        list(machine.replicas.values()),
        max_surge=4,
        max_unavailable=0,
        room=machine.room(),
    )
    assert step.launch == 2 and step.drain == ()


def canary_counts(target: int, weights: list[int]) -> list[int]:
    return [min(target, max(1, -(-target * w // 100))) for w in weights]


@pytest.mark.parametrize("target", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("per_replica", [1, 2])
@pytest.mark.parametrize("spare_replicas", [0, 1, 3])
def test_canary_takes_free_room_then_stable_places_and_finishes(
    target: int, per_replica: int, spare_replicas: int
) -> None:
    machine = full_of_old(target, per_replica, spare_replicas * per_replica)
    counts = canary_counts(target, [10, 50, 100])
    step_index, complete = 0, False
    for _ in range(ROUNDS):
        wanted = counts[step_index]
        step = plan_canary(
            target,
            2,
            list(machine.replicas.values()),
            new_count=wanted,
            complete=complete,
            stable_target=target,
            room=machine.room(),
        )
        machine.drain([rid for rid, _ in step.drain])
        if step.done:  # the last old replicas drain in the step that finishes
            machine.advance()
            break
        machine.start(2, step.launch)
        machine.start(1, step.launch_old)
        if not complete:
            stable_live = sum(
                1 for r in machine.replicas.values() if r.version == 1 and r.status.is_live
            )
            if wanted < target:
                assert stable_live >= 1, "the stable version lost its last replica"
        # One replica changes hands at a time: serving never drops by more than one.
        assert len(step.routable) >= target - 1
        machine.advance()
        if machine.ready(2) >= wanted and not complete:
            if step_index + 1 < len(counts):
                step_index += 1
            else:
                complete = True
    else:
        pytest.fail("the canary never finished")
    assert machine.ready(2) == target and machine.ready(1) == 0
