"""One service's reconcile loop: observe, decide, plan (the pure planner), apply.

The loop compares what runs with what the spec wants on every tick (and at
once when a probe or an exit changes something), so a missed event is fixed on
the next tick rather than lost. Every replica state change goes through
:meth:`ServiceRuntime.transition`, checked against ``states.REPLICA_MOVES`` and
recorded as an event row. The update in flight is the :class:`Rollout`'s;
provisioning, probing, re-adoption, draining and exits live beside this module
and reach it only through their ports (port.py). Replicas are reached only through
the backend (backends/base.py), and time only through the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from steadyserve.backends.base import Backend, ReplicaHandle
from steadyserve.controller import draining
from steadyserve.controller import service_health as health
from steadyserve.controller.autoscaler import Autoscaler, fleet_of
from steadyserve.controller.capacity import CapacityPool
from steadyserve.controller.clock import Clock, SystemClock
from steadyserve.controller.exits import reap_exited
from steadyserve.controller.fixed_ports import PortWatch
from steadyserve.controller.lb_process import LoadBalancerProcess
from steadyserve.controller.load import poll_own_counts
from steadyserve.controller.multiplexed import ModelReports
from steadyserve.controller.port import HeldReplica, Prober, ReplicaTask
from steadyserve.controller.probes import probe_ready
from steadyserve.controller.provisioning import launch, stop_unstarted
from steadyserve.controller.readopt import readopt
from steadyserve.controller.replica_env import ReplicaEnvironment
from steadyserve.controller.rollout import Rollout
from steadyserve.controller.rollout.canary import CanaryDriver
from steadyserve.controller.routes import RoutePublisher
from steadyserve.controller.versions import VersionJudge
from steadyserve.core.autoscale import Policy as AutoscalePolicy
from steadyserve.core.planner import Plan, ReplicaView
from steadyserve.core.states import (
    EventKind,
    ReplicaStatus,
    ServiceStatus,
    UpdateStatus,
    check_move,
)
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.spec.autoscaling import policy_for
from steadyserve.store import ReplicaRow, ServiceRow, Store
from steadyserve.wire.lb_process import env_for as tls_env

log = logging.getLogger("steadyserve.controller")

TICK_S = 0.2


@dataclass
class Tick:
    """What one reconcile pass has decided so far, handed from step to step."""

    plan: Plan  # the last tick's until the plan step makes this one's
    target: int = 0


class ServiceRuntime:
    def __init__(
        self,
        home: Home,
        store: Store,
        backend: Backend,
        probe_session: aiohttp.ClientSession,
        epoch: str,
        row: ServiceRow,
        *,
        clock: Clock | None = None,
        prober: Prober | None = None,
        lb: LoadBalancerProcess | None = None,
        capacity: CapacityPool | None = None,
    ) -> None:
        self.home = home
        self.store = store
        self.backend = backend
        self.probe_session = probe_session
        self.clock: Clock = clock or SystemClock()
        self.prober: Prober = prober or functools.partial(probe_ready, probe_session)
        self.row = row
        self.name = row.name
        self.failure_reasons: dict[int, str] = {}  # why each replica failed, for status
        self.environment = ReplicaEnvironment(home, self.name)
        self.routes = RoutePublisher(epoch, self.clock.now)
        self.replicas: dict[int, ReplicaRow] = {r.id: r for r in store.replicas(self.name)}
        self.held: dict[int, HeldReplica] = {}
        # The machine's GPUs, cores and fixed ports, shared with every other service
        # of the controller (controller/capacity.py); alone, this service's rows.
        self.capacity = capacity or CapacityPool.alone(
            backend, lambda: list(self.replicas.values())
        )
        self.waiting: dict[int, str] = {}
        """PENDING replicas that do not fit yet, and what they miss (status notices)."""
        self.versions = VersionJudge(
            {r.version for r in self.replicas.values() if r.ready_at is not None}
            | {v.version for v in store.versions(self.name) if v.served},
            [row.version] if row.status is ServiceStatus.FAILED else [],
            lambda why: store.add_event(self.name, None, None, EventKind.VERSION_BROKEN, why),
            lambda version: store.update_version(self.name, version, served=1),
        )
        self.ready_versions, self.broken_versions = self.versions.ready, self.versions.broken
        self._specs: dict[int, ServiceSpec] = {}
        self.lb = lb or LoadBalancerProcess(home, self.name, row.port)
        self._wake, self._task = asyncio.Event(), None  # type: asyncio.Event, asyncio.Task[None] | None
        self._stops: set[asyncio.Task[None]] = set()
        # Recent reconcile tick durations, for /api/v1/metrics and the benchmarks.
        self.tick_seconds: deque[float] = deque(maxlen=200)
        self._stopping, self.plan = False, Plan()
        self.rollout = Rollout(self, store.latest_update(self.name))
        # The target every plan sizes to (controller/autoscaler.py).
        self.autoscaler = Autoscaler(
            self._scaling_policy(),
            health.live_of_target(self),
            lambda why: self.store.add_event(self.name, None, None, EventKind.AUTOSCALE, why),
            name=self.name,
            policy_workdir=lambda: self.home.version_workdir(self.name, self.row.version),
        )
        self._own_counts: asyncio.Task[None] | None = None
        # Multiplexed model ids per replica; a change wakes the loop to publish them.
        self.models = ModelReports(self.wake)
        self.lb.tls_env = tls_env(self.spec.service.tls, self.spec.service.auth_key)
        # Replicas listening on a fixed port, not $PORT (fixed_ports.py).
        self.port_watch = PortWatch(
            lambda rid, notice: store.add_event(self.name, rid, None, EventKind.WRONG_PORT, notice),
            self.clock.now,
        )

    # versions ------------------------------------------------------------
    @property
    def spec(self) -> ServiceSpec:
        """The spec of the target version: what new replicas get."""
        return self.spec_for(self.row.version)

    @property
    def updating(self) -> bool:
        return self.rollout.updating

    @property
    def stopping(self) -> bool:
        """Being taken down: no tick runs, and the status says SHUTTING_DOWN."""
        return self._stopping

    @property
    def canary(self) -> CanaryDriver:
        """The step machine, weights and analysis: the rollout's (rollout/canary.py)."""
        return self.rollout.canary

    def spec_for(self, version: int) -> ServiceSpec:
        """A version's spec; replicas of older versions may still run and be probed."""
        spec = self._specs.get(version)
        if spec is None:
            row = self.store.version(self.name, version)
            if row is None:
                raise RuntimeError(f"service {self.name} has no version {version}")
            spec = self._specs[version] = ServiceSpec.from_json(row.spec_json)
        return spec

    def set_version(self, version: int, spec: ServiceSpec | None = None) -> None:
        """Make ``version`` the target: the spec new replicas get and probes use."""
        if spec is not None:
            self._specs[version] = spec
        self.row.version = version
        self.store.set_service_fields(self.name, version=version)
        self.wake()

    # lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Re-adopt what a previous controller left running, then reconcile."""
        self.resume()
        self._task = asyncio.create_task(self._loop(), name=f"reconcile-{self.name}")
        self._own_counts = asyncio.create_task(
            poll_own_counts(
                self.probe_session,
                functools.partial(health.count_targets, self),
                lambda: self.autoscaler.load,
                self.clock.now,
                on_info=self.models.seen,
            ),
            name=f"own-counts-{self.name}",
        )

    def resume(self) -> None:
        """Re-adoption alone (readopt.py), without starting the loop: what tests drive."""
        readopt(self)
        self.lb.adopt(self.row.lb_pid, self.row.lb_create_time)
        self.rollout.resume()

    def adopted_pids(self) -> set[int]:
        """Pids this runtime manages (replicas and the LB), for the orphan sweep."""
        pids = {h.handle.pid for h in self.held.values() if h.handle and h.handle.pid}
        if self.lb.handle is not None and self.lb.handle.pid is not None:
            pids.add(self.lb.handle.pid)
        return pids

    async def _quiesce(self) -> None:
        """Stop this runtime's own loops: the reconcile loop, the count polls, the policy."""
        if self._own_counts:
            self._own_counts.cancel()
        await self._stop_loop()
        await asyncio.to_thread(self.autoscaler.close)

    async def detach(self) -> None:
        """Stop managing (controller shutdown): replicas and the LB keep running."""
        await self._quiesce()
        for held in self.held.values():
            for task in held.tasks:
                task.cancel()
        self.lb.detach()

    async def take_down(self, purge: bool) -> None:
        """Stop the load balancer and every replica, then forget the service. Recorded
        first: a write that fails (a full disk) leaves the service as it was, managed."""
        self.store.begin_down(self.name, self.row.status, purge)
        self._stopping, self.row.status = True, ServiceStatus.SHUTTING_DOWN
        await self._quiesce()
        await asyncio.gather(self.lb.stop(), *draining.stop_all(self), return_exceptions=True)
        self.store.delete_service(self.name, purge=purge)

    async def _stop_loop(self) -> None:
        """Cancel the reconcile loop, again if need be: before Python 3.12, ``asyncio.wait_for``
        swallows a cancel landing as the wake fires (an update's wake just before a down)."""
        for _ in range(100):
            if self._task is None or self._task.done():
                return
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=1.0)

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                started = time.perf_counter()
                self.tick()
                self.tick_seconds.append(time.perf_counter() - started)
            except Exception:  # a bug in one tick must not kill the service's supervision
                log.exception("reconcile tick of %s failed", self.name)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            self._wake.clear()

    # reconcile -------------------------------------------------------------
    def views(self) -> list[ReplicaView]:
        return [ReplicaView(r.id, r.version, r.status) for r in self.replicas.values()]

    def tick_steps(self) -> tuple[tuple[str, Callable[[Tick], None]], ...]:
        """One reconcile pass, in order, written here only (docs/design.md, "The
        reconcile tick", says why each step comes where it does)."""
        return (
            ("observe", self._supervise_lb),
            ("observe", self._reap_exited),
            ("observe", self._recheck_waiting),
            ("decide", self._roll_back_failed),
            ("decide", self._step_canary),
            ("decide", self._autoscale),
            ("plan", self._plan),
            ("apply", self._finish),
            ("apply", self._say_capacity),
            ("apply", self._route),
            ("apply", self._drain),
            ("apply", self._forget),
            ("apply", self._launch),
            ("apply", self._heal),
            ("apply", self._update_status),
        )

    def tick(self) -> None:
        """One reconcile pass: :meth:`tick_steps`, in order."""
        if self._stopping:
            return
        state = Tick(plan=self.plan)
        for _, step in self.tick_steps():
            step(state)

    def _supervise_lb(self, _: Tick) -> None:
        self.lb.supervise(self.store, self.row, self.spec.service.load_balancer.workers)

    def _recheck_waiting(self, _: Tick) -> None:
        if self.capacity.waiting:
            self.capacity.changed()  # a waiting replica looks again (a release may be unannounced)

    def _roll_back_failed(self, _: Tick) -> None:
        self.rollout.check()

    def _step_canary(self, _: Tick) -> None:
        if self.updating:
            self.canary.tick()  # judge and move; an abort rolls back here

    def _plan(self, tick: Tick) -> None:
        """The pure plan for this tick, and whether it finishes the update in flight."""
        target = self.target_replicas()
        broken = self.row.version in self.broken_versions
        plan, converged = self.rollout.plan(self.views(), target, broken)
        if converged and self.updating:
            message = f"version {self.row.version} serves with {target} replicas"
            plan = replace(plan, done=True, finish=message)
        tick.target, tick.plan = target, plan
        self.plan = plan

    def _finish(self, tick: Tick) -> None:
        if tick.plan.finish is not None:
            self.rollout.finish(UpdateStatus.SUCCEEDED, tick.plan.finish)

    def _say_capacity(self, tick: Tick) -> None:
        self.rollout.say_capacity(tick.plan.note)

    def _route(self, tick: Tick) -> None:
        health.publish(self, tick.plan.routable)

    def _drain(self, tick: Tick) -> None:
        for replica_id, reason in tick.plan.drain:
            replica = self.replicas[replica_id]
            self.transition(replica, ReplicaStatus.SHUTTING_DOWN, reason)
            self.spawn(replica, self.retire(replica, reason))

    def _forget(self, tick: Tick) -> None:
        for replica_id in tick.plan.forget:
            replica = self.replicas.pop(replica_id)
            self.held.pop(replica_id, None)
            self.store.remove_replica(replica, "failed replica no longer listed")

    def _launch(self, tick: Tick) -> None:
        for _ in range(tick.plan.launch):
            self.launch(self.row.version)

    def _heal(self, tick: Tick) -> None:
        self.rollout.heal(tick.plan.launch_old)  # the stable version heals

    # autoscaling hooks (the logic is in controller/autoscaler.py) -----
    def target_replicas(self) -> int:
        """The number of replicas the service aims for now: the autoscaler's target
        (a fixed ``replicas: N`` is a policy too). Steady plans and updates size to it."""
        return self.autoscaler.target()

    def _scaling_policy(self) -> AutoscalePolicy:
        """The autoscaling policy of the current spec."""
        return policy_for(self.spec.service)

    def _autoscale(self, tick: Tick) -> None:
        self.autoscaler.set_policy(self._scaling_policy())
        routable = sorted(tick.plan.routable)  # the last tick's plan
        fleet = fleet_of(self.spec, self.replicas.values(), self.row.version)
        self.autoscaler.step(self.clock.now(), len(routable), routable, fleet)
        if self.autoscaler.scales and not self.updating:  # an update keeps the cap it met
            wanted = self.autoscaler.state.target
            self.autoscaler.cap(*self.capacity.cap(self.spec, wanted, health.live_of_target(self)))

    def scale_from_zero(self) -> int:
        """The load balancer holds a request and nothing serves: launch at once."""
        decision = self.autoscaler.request_waiting(self.clock.now())
        if decision.changed:
            self.wake()
        return decision.target

    def _update_status(self, tick: Tick) -> None:
        health.update_status(self, tick)  # service_health.py: status and route table

    def lb_ready(self) -> bool:  # a pool has no load balancer to wait for (pool_runtime.py)
        return self.lb.running and self.routes.polls_since_start > 0

    def publish_now(self) -> None:
        """Publish the ready replicas at once (a replica left routing between ticks)."""
        health.publish(
            self, frozenset(r.id for r in self.replicas.values() if r.status is ReplicaStatus.READY)
        )

    def _reap_exited(self, _: Tick) -> None:
        reap_exited(self)

    def judge_version(self, version: int) -> None:
        """SkyServe's rule: failing before any replica of the version was ready means broken."""
        self.versions.judge(version)

    # replica lifecycle ---------------------------------------------------
    def hold(self, replica_id: int) -> HeldReplica:
        return self.held.setdefault(replica_id, HeldReplica())

    def spawn(self, replica: ReplicaRow, coro: ReplicaTask) -> None:
        """Run a task for the replica; it is cancelled when the replica fails or goes."""
        held = self.hold(replica.id)
        task: asyncio.Task[None] = asyncio.create_task(coro)
        held.tasks.append(task)
        task.add_done_callback(lambda t: held.tasks.remove(t) if t in held.tasks else None)

    def transition(
        self, replica: ReplicaRow, new: ReplicaStatus, reason: str, **values: Any
    ) -> None:
        """The one way a replica's state changes: checked against the table of
        allowed moves (``states.REPLICA_MOVES``), written and recorded as an event."""
        check_move(replica.status, new)
        self.store.set_replica_status(replica, new, reason, **values)

    def launch(self, version: int) -> None:
        """Add a replica of ``version`` and start provisioning it (provisioning.py)."""
        launch(self, version)

    def stop_setup(self, version: int, why: str) -> None:
        """``version`` was given up: stop its replicas not started yet, and their setup."""
        stop_unstarted(self, version, why)

    def version_served(self, version: int) -> None:
        """A replica of ``version`` turned READY: the version serves, so it is not broken."""
        self.versions.served(version)

    async def learn_models(self, replica: ReplicaRow) -> None:
        await health.learn_models(self, replica)  # service_health.py

    async def deliver_user_config(
        self, replica: ReplicaRow, *, replace_on_refusal: bool = False
    ) -> tuple[bool, str]:
        """Hand a replica its version's ``user_config`` (the rollout's to do)."""
        return await self.rollout.deliver_user_config(
            replica, replace_on_refusal=replace_on_refusal
        )

    def mark_failed(self, replica: ReplicaRow, status: ReplicaStatus, reason: str) -> None:
        """Take a replica out of routing at once, stop its process, keep it listed."""
        self.rollout.count_failure(replica)
        self.transition(replica, status, reason)
        self.failure_reasons[replica.id] = reason
        self.publish_now()
        held = self.hold(replica.id)
        current = asyncio.current_task()
        for task in held.tasks:
            if task is not current:
                task.cancel()
        if held.handle is not None:
            stop = asyncio.get_running_loop().create_task(self.stop_failed(replica, held.handle))
            self._stops.add(stop)
            stop.add_done_callback(self._stops.discard)
        self.wake()

    async def stop_failed(self, replica: ReplicaRow, handle: ReplicaHandle) -> None:
        await draining.stop_failed(self, replica, handle)

    async def retire(self, replica: ReplicaRow, reason: str) -> None:
        """Drain, then stop and forget (controller/draining.py)."""
        await draining.retire(self, replica, reason)
