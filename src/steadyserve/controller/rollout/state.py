"""A service's update in flight: one :class:`Rollout` per service runtime, the one
owner of update state.

The rollout owns the update row, the count of the new version's failed
replicas, the tasks that deliver ``user_config`` in place (rollout/in_place.py),
the canary step (rollout/canary.py), the hold of a paused rolling or blue-green
update (rollout/holds.py), the blue-green switch (rollout/blue_green.py), and
the plan that converges to the target version; it decides which version is the
target (begin, finish, roll back, revert), and replaces stable replicas lost
while the stable version still serves (heal). All of it is persisted through
the :class:`~steadyserve.store.Store` (its one connection; the progressive
tables are rollout/tables.py), each change one transaction, and every update
status and version outcome moves by ``Store.move_update``/``move_outcome``,
checked against ``UPDATE_MOVES``/``OUTCOME_MOVES``. The planner decides what
runs. The runtime carries out, and the rollout reaches it only through its
public methods (``set_version``, ``spec_for``, ``mark_failed``, ``spawn``,
``publish_now``, ``wake``, ``launch``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import steadyserve.controller.rollout.in_place as in_place
from steadyserve.controller.autoscaler import capacities_of
from steadyserve.controller.rollout.blue_green import BlueGreen
from steadyserve.controller.rollout.canary import CanaryDriver
from steadyserve.controller.rollout.holds import Holds
from steadyserve.controller.rollout.tables import CanaryTable
from steadyserve.core.planner import Plan, ReplicaView, failed_to_forget, plan_steady
from steadyserve.core.states import (
    UPDATE_START,
    EventKind,
    ReplicaStatus,
    UpdateMode,
    UpdateStatus,
    VersionOutcome,
    update_event,
)
from steadyserve.core.strategies import UpdateStep, strategy_of
from steadyserve.spec import ServiceSpec
from steadyserve.store import ReplicaRow, UpdateRow

if TYPE_CHECKING:
    from steadyserve.controller.port import RolloutPort


class ProgressDriver(Protocol):
    def options(self, target: int, version: int, views: Sequence[ReplicaView]) -> dict[str, Any]:
        """The fields of this tick's UpdateStep that the update's progress decides."""
        ...


class Rollout:
    def __init__(self, runtime: RolloutPort, update: UpdateRow | None) -> None:
        self.rt = runtime
        self.update = update
        """The latest update of the service (finished or not); None before the first."""
        self.failures = 0
        """Replicas of the target version that failed during this update."""
        self._tasks: set[asyncio.Task[None]] = set()
        self.lost_stable: list[int] = []
        """Replicas of another version that failed during this update, not yet replaced
        (heal names them). Kept in memory: a restarted controller knows the ones
        re-adoption fails, not those the previous controller saw fail."""
        self._capacity_note: str | None = None
        self.table = CanaryTable(runtime.store)
        self.canary = CanaryDriver(runtime, self, self.table)
        """The step machine, weights and analysis of a canary update."""
        self.blue_green = BlueGreen(runtime, self, self.table)
        """Preview, promote and the warm old version of a blue-green update."""
        self.holds = Holds(runtime, self, self.table)
        """``steady pause`` of a rolling or blue-green update."""
        self.drivers: dict[UpdateMode, ProgressDriver] = {
            UpdateMode.CANARY: self.canary,
            UpdateMode.BLUE_GREEN: self.blue_green,
        }
        """The strategies whose plan reads progress the controller keeps (a canary's
        step, a blue-green switch): each driver gives its step's options."""

    @property
    def updating(self) -> bool:
        return self.update is not None and self.update.status is UpdateStatus.IN_PROGRESS

    @property
    def in_place(self) -> bool:
        update = self.update
        return self.updating and update is not None and not strategy_of(update.mode).restarts

    def takes_in_place(self) -> bool:
        """Whether a change of ``user_config`` alone can be applied in place now.

        Yes with an update in flight (it joins a restart update, supersedes an
        in-place one) or when every live replica runs the target version. Not while
        the service converges with no update in flight (after an abort or a
        rollback): relabelling the target's replicas, often none, would succeed at
        once, and the replicas launched to converge would be the first to meet the
        new config, with no update left to roll back if they refuse it (the
        simulator's seed 385: the service served two old versions for good)."""
        if self.updating:
            return True
        version = self.rt.row.version
        return not any(
            r.status.is_live and r.version != version for r in self.rt.replicas.values()
        )

    # planning ------------------------------------------------------------
    def plan(self, views: list[ReplicaView], target: int, broken: bool) -> tuple[Plan, bool]:
        """Steady state, or converging to the current version by the update's mode; and
        whether a restart update has converged (pure: the caller records it)."""
        version = self.rt.row.version
        converging = any(v.status.is_live and v.version != version for v in views)
        if self.in_place or not (self.updating or converging):
            carries = capacities_of(self.rt.spec, self.rt.replicas.values())
            policy = self.rt.spec.service.replica_policy
            plan = plan_steady(
                target,
                version,
                views,
                version_broken=broken,
                capacities=carries,
                in_flight=self.rt.routes.inflight,
                replace_failed=policy is None or policy.auto_restart,
            )
            return plan, False
        plan, done = self._converging_plan(target, version, views, broken)
        # A long update with a crash loop must not grow the replica list without bound.
        return replace(plan, forget=failed_to_forget(views, version, updating=True)), done

    def _converging_plan(
        self, target: int, version: int, views: list[ReplicaView], broken: bool
    ) -> tuple[Plan, bool]:
        """The plan of an update in flight (or of replicas left of another version)."""
        updating = self.updating and self.update is not None
        mode = self.update.mode if updating and self.update is not None else UpdateMode.ROLLING
        strategy = strategy_of(mode)
        held = strategy.holds and self.holds.held()
        svc = self.rt.spec.service
        # The update's own progress (a canary's step, a blue-green switch), if it has any.
        driver = self.drivers.get(mode) if updating else None
        progress = driver.options(target, version, views) if driver is not None else {}
        # An aborted canary's version serves no client again (its weight went to 0),
        # whatever the stable version's size: it drains now, not by the rolling rule
        # that converges what is left over, which would keep it routed (at the share
        # of the replicas it has) until the stable version is back at its target. But
        # while no stable replica is READY, that rule keeps it: better than nothing.
        gone = self._aborted_canary(views)
        views = [v for v in views if v.id not in gone]
        step = strategy.plan(
            UpdateStep(
                target,
                version,
                views,
                max_surge=svc.max_surge_count(target),
                max_unavailable=svc.max_unavailable_count(target),
                old_broken=self.stable_broken(),
                stable_target=self.stable_target(),
                room=self.room(target),
                **progress,
            )
        )
        if held:  # a paused update launches and drains nothing
            return self.holds.hold_plan(step.routable), False
        plan = Plan(
            launch=0 if broken else step.launch,
            stop=(*step.drain, *gone.items()),
            routable=step.routable,
            launch_old=step.launch_old,  # the stable version heals (heal)
            note=step.note,
        )
        return plan, step.done

    def _aborted_canary(self, views: Sequence[ReplicaView]) -> dict[int, str]:
        """The live replicas of the canary whose update just ended FAILED (aborted,
        or rolled back on its replicas' failures), with why they drain; none while no
        replica of the stable version is READY (they would leave nothing serving)."""
        update = self.update
        if (
            update is None
            or self.updating
            or update.mode is not UpdateMode.CANARY
            or update.status is not UpdateStatus.FAILED
            or update.to_version == self.rt.row.version
        ):
            return {}
        stable = self.rt.row.version
        if not any(v.version == stable and v.status is ReplicaStatus.READY for v in views):
            return {}
        why = f"version {update.to_version}'s canary failed: it serves no client again"
        return {v.id: why for v in views if v.version == update.to_version and v.status.is_live}

    def room(self, target: int) -> int | None:
        """How many more replicas of the target version the machine can take now
        (controller/capacity.py); None when they ask for nothing it divides."""
        return self.rt.capacity.limit(self.rt.spec, 2 * target + 1)

    def say_capacity(self, note: str | None) -> None:
        """Record once per update (and per change of it) why a step was smaller than
        its mode would make it: what the machine lacks."""
        if note is None or not self.updating or note == self._capacity_note:
            return
        self._capacity_note = note
        why = self.rt.capacity.why_not(self.rt.spec)
        self.rt.store.add_event(
            self.rt.name, None, None, EventKind.CAPACITY, f"{note} ({why})" if why else note
        )

    def stable_target(self) -> int | None:
        """The size the stable version had when the update in flight started: it heals
        back to that (planner.stable_size), never up to the new version's target."""
        return self.update.stable_replicas if self.updating and self.update is not None else None

    def stable_broken(self) -> bool:
        """Whether the update's stable (from) version is judged broken: never relaunched."""
        return self.update is not None and self.update.from_version in self.rt.broken_versions

    def heal(self, count: int) -> None:
        """Start ``count`` replicas of the stable version, which lost some while it
        still serves (a canary, or a blue-green update before its switch): the
        planner's ``launch_old``. Each gets an event naming the replica it replaces."""
        update = self.update
        if count <= 0 or update is None or not self.updating:
            return
        rt = self.rt
        strategy = strategy_of(update.mode)
        when, kind = strategy.heal_when, strategy.heal_event
        stable = update.from_version
        for _ in range(count):
            if self.lost_stable:
                lost = self.lost_stable.pop(0)
                why = f"stable replica {lost} failed {when}; replacing it with version {stable}"
            else:  # the target grew, a node was lost, or a restart forgot which one failed
                why = f"the stable version is below its target {when}; launching version {stable}"
            rt.store.add_event(rt.name, None, None, kind, why)
            rt.launch(stable)

    def failure(self) -> str | None:
        """Why the update in flight has failed, or None while it may still succeed."""
        assert self.update is not None
        rt = self.rt
        version = self.update.to_version
        if version in rt.broken_versions:
            return f"version {version} failed before any replica was ready"
        deadline = self.update.started_at + rt.spec.service.update_deadline_s
        # A canary's pauses (and a wait for promote) are its own timeline: no deadline;
        # the time a rolling or blue-green update spends paused does not count.
        deadline += self.holds.paused_seconds()
        if strategy_of(self.update.mode).deadline and rt.clock.wall() > deadline:
            return f"not done within update_deadline_s={rt.spec.service.update_deadline_s:g}"
        limit = max(3, rt.target_replicas())
        if self.failures >= limit:
            return f"{self.failures} replicas of version {version} failed"
        return None

    def count_failure(self, replica: ReplicaRow) -> None:
        """A replica failed: one more against the update if it runs the target version;
        a stable one is remembered, for the event of its replacement (heal)."""
        if not self.updating or self.update is None:
            return
        if replica.version == self.update.to_version:
            self.failures += 1
        elif replica.status.is_live and replica.id not in self.lost_stable:
            self.lost_stable.append(replica.id)

    def check(self) -> None:
        """On every tick while updating: roll back an update that has failed."""
        if self.updating:
            why = self.failure()
            if why:
                self.roll_back(why)

    # outcomes ------------------------------------------------------------
    def finish(self, status: UpdateStatus, message: str) -> None:
        """End the update in flight; a success retires the stable version and makes the
        target the stable one (one transaction: the update row, its event, the outcomes)."""
        assert self.update is not None
        rt = self.rt
        store = rt.store
        with store.transaction():
            store.move_update(self.update, status, message, rt.clock.wall())
            store.add_event(rt.name, None, UpdateStatus.IN_PROGRESS, update_event(status), message)
            # What an in-place change joined it on top of was reached (and retired by the
            # newer version) or failed with it.
            succeeded = status is UpdateStatus.SUCCEEDED
            ended = VersionOutcome.RETIRED if succeeded else VersionOutcome.FAILED
            self._end_joined(self.update, ended)
            if succeeded:
                if rt.row.stable_version != rt.row.version:
                    store.move_outcome(rt.name, rt.row.stable_version, VersionOutcome.RETIRED)
                store.set_service_fields(rt.name, stable_version=rt.row.version)
                store.move_outcome(rt.name, rt.row.version, VersionOutcome.ACTIVE)
        if status is UpdateStatus.SUCCEEDED:
            rt.row.stable_version = rt.row.version

    def _end_joined(self, update: UpdateRow, outcome: VersionOutcome) -> None:
        """End the versions in-place changes joined ``update`` on top of, as it ends.

        An in-place change during a restart update becomes the update's target
        (``begin``); the version it was applied onto, the restart's target until
        then, is its ``base_version``, and so on down to the update's own first
        target. Read from the rows, so a restarted controller ends them too."""
        store, name = self.rt.store, self.rt.name
        for version in in_place.joined_chain(self.rt, update)[1:]:
            row = store.version(name, version)
            if row is None or row.outcome is not VersionOutcome.IN_PROGRESS:
                return  # ended already: not one of this update's
            store.move_outcome(name, version, outcome)

    def roll_back(self, reason: str) -> None:
        """Make the last good version the target again; new replicas drain by the planner."""
        assert self.update is not None
        rt = self.rt
        with rt.store.transaction():
            rt.store.move_outcome(rt.name, self.update.to_version, VersionOutcome.FAILED)
            self.finish(
                UpdateStatus.FAILED, f"{reason}; rolled back to version {self.update.from_version}"
            )
            rt.set_version(self.update.from_version)
        rt.stop_setup(self.update.to_version, reason)

    def begin(
        self,
        version: int,
        spec: ServiceSpec,
        mode: UpdateMode,
        message: str,
        *,
        rollback: bool = False,
    ) -> UpdateRow:
        """Start converging to ``version``: relabel in place, or launch by ``mode``."""
        rt = self.rt
        in_place = not strategy_of(mode).restarts
        previous = self.update
        old_version, old_spec = rt.row.version, rt.spec
        # An in-place change during a restart update joins it; any other update in
        # flight is superseded.
        joins = in_place and self.updating and not self.in_place
        superseded = previous if self.updating and not joins else None
        if superseded is not None:
            # Superseded (one change: its row and its version's outcome), and what it
            # had not started yet stopped, before the new update starts.
            ended = UpdateStatus.ROLLED_BACK if rollback else UpdateStatus.FAILED
            why = f"superseded by version {version}"
            with rt.store.transaction():
                rt.store.move_update(superseded, ended, why, rt.clock.wall())
                rt.store.move_outcome(rt.name, superseded.to_version, VersionOutcome.SUPERSEDED)
                self._end_joined(superseded, VersionOutcome.SUPERSEDED)
            rt.stop_setup(superseded.to_version, why)
        # The new update's row, its event and the target version: one change.
        with rt.store.transaction():
            if joins and previous is not None:
                previous.to_version = version
                previous.message = f"{previous.message}; then {message}"
                rt.store.save_update(previous)
                update = previous
            else:
                update = self._new_update(superseded, version, mode, message, old_version)
            rt.store.add_event(
                rt.name, None, None, EventKind.UPDATE_STARTED, f"{update.mode}: {message}"
            )
            rt.set_version(version, spec)
        if in_place:
            relabelled = self.relabel(old_version, version)
            self._spawn(self.deliver_in_place(update, old_spec, old_version, relabelled))
        return update

    def _new_update(
        self,
        superseded: UpdateRow | None,
        version: int,
        mode: UpdateMode,
        message: str,
        old_version: int,
    ) -> UpdateRow:
        """Add the row of a new update and make it the one in flight."""
        rt = self.rt
        in_place = not strategy_of(mode).restarts
        # The stable version's size now: what it heals back to during the update.
        # A superseded update's stable version is still this one's, at the size it
        # had before either began (the target now may be the superseded version's).
        stable_size = rt.target_replicas()
        if superseded is not None and superseded.stable_replicas is not None:
            stable_size = superseded.stable_replicas
        update = rt.store.add_update(
            UpdateRow(
                id=None,
                service=rt.name,
                mode=mode,
                from_version=old_version if in_place else rt.row.stable_version,
                to_version=version,
                status=UPDATE_START,
                message=message,
                started_at=rt.clock.wall(),
                stable_replicas=stable_size,
            )
        )
        self.failures = 0
        self.lost_stable = []
        self._capacity_note = None
        self.update = update
        return update

    def resume(self) -> None:
        """After a controller restart mid-way through an in-place update: relabel what
        the previous controller had not, deliver again (reconfigure is idempotent)
        and finish the update."""
        if not self.in_place or self.update is None:
            return
        rt = self.rt
        update = self.update
        old_spec = rt.spec_for(update.from_version)
        relabelled = self.relabel(update.from_version, rt.row.version)
        relabelled += [
            r
            for r in rt.replicas.values()
            if r.status.is_live and r.version == rt.row.version and r not in relabelled
        ]
        self._spawn(self.deliver_in_place(update, old_spec, update.from_version, relabelled))

    # in place (rollout/in_place.py) --------------------------------------
    def relabel(self, old_version: int, new_version: int) -> list[ReplicaRow]:
        return in_place.relabel(self, old_version, new_version)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def deliver_in_place(
        self,
        update: UpdateRow,
        old_spec: ServiceSpec,
        old_version: int,
        relabelled: list[ReplicaRow],
    ) -> Coroutine[Any, Any, None]:
        return in_place.deliver(self, update, old_spec, old_version, relabelled)

    async def deliver_user_config(
        self, replica: ReplicaRow, *, replace_on_refusal: bool = False
    ) -> tuple[bool, str]:
        """Hand user_config to one replica (rollout/in_place.py)."""
        return await in_place.deliver_user_config(
            self.rt, replica, replace_on_refusal=replace_on_refusal
        )
