"""One service's reconcile loop: carry out what the planner decides.

The loop compares what runs with what the spec wants on every tick (and at
once when a probe or an exit changes something), so a missed event is fixed on
the next tick rather than lost. All transitions go through the store, which
records each as an event row.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import aiohttp

from steadyserve import replica_contract as contract
from steadyserve.autoscale import policy_for
from steadyserve.backends.base import Backend, LaunchRequest, ProvisionError, ReplicaHandle
from steadyserve.backends.local import free_port
from steadyserve.controller import rollout
from steadyserve.controller.autoscaler import EVENT as AUTOSCALE_EVENT
from steadyserve.controller.autoscaler import Autoscaler
from steadyserve.controller.lb_process import LoadBalancerProcess
from steadyserve.controller.load import CountTarget, poll_own_counts
from steadyserve.controller.probes import probe_ready
from steadyserve.controller.rollout import IN_PROGRESS, SUCCEEDED
from steadyserve.controller.routes import RoutePublisher
from steadyserve.paths import Home
from steadyserve.planner import Plan, ReplicaView, plan_steady, plan_update, service_status
from steadyserve.spec import ReadinessProbe, ServiceSpec
from steadyserve.state import ReplicaRow, ServiceRow, Store, UpdateRow
from steadyserve.states import ReplicaStatus, ServiceStatus

log = logging.getLogger("steadyserve.controller")

TICK_S = 0.2
# A replica that is still starting is probed this often (backing off to the
# configured period), so it turns READY within moments of listening.
STARTING_PROBE_MIN_S = 0.1
FAILED_PROBES_TO_REPLACE = 3
CONTROL_HEALTH = "/-/healthz"


@dataclass
class ReplicaRuntime:
    """What the controller holds for a replica beyond its row."""

    handle: ReplicaHandle | None = None
    started_at: float | None = None
    failed_probes: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ServiceRuntime:
    def __init__(
        self,
        home: Home,
        store: Store,
        backend: Backend,
        probe_session: aiohttp.ClientSession,
        epoch: str,
        row: ServiceRow,
    ) -> None:
        self.home = home
        self.store = store
        self.backend = backend
        self.probe_session = probe_session
        self.row = row
        self.name = row.name
        self.routes = RoutePublisher(epoch)
        self.replicas: dict[int, ReplicaRow] = {r.id: r for r in store.replicas(self.name)}
        self.runtime: dict[int, ReplicaRuntime] = {}
        self.ready_versions: set[int] = {
            r.version for r in self.replicas.values() if r.ready_at is not None
        }
        self.broken_versions: set[int] = set()
        if row.status == ServiceStatus.FAILED.value:
            self.broken_versions.add(row.version)
        self.spec = self._load_spec(row.version)
        self._old_specs: dict[int, ServiceSpec] = {}
        self.lb = LoadBalancerProcess(home, self.name, row.port)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._update_tasks: set[asyncio.Task[None]] = set()
        # Recent reconcile tick durations, for /api/v1/metrics and the benchmarks.
        self.tick_seconds: deque[float] = deque(maxlen=200)
        self._stopping = False
        self.plan = Plan()
        latest = store.latest_update(self.name)
        self.update: UpdateRow | None = latest
        self.update_failures = 0
        # Autoscaling hook: the target every plan sizes to (controller/autoscaler.py).
        self.autoscaler = Autoscaler(
            policy_for(self.spec.service), self._live_current(), self._record_scaling
        )
        self._own_counts: asyncio.Task[None] | None = None

    def _load_spec(self, version: int) -> ServiceSpec:
        row = self.store.version(self.name, version)
        if row is None:
            raise RuntimeError(f"service {self.name} has no version {version}")
        return ServiceSpec.from_json(row.spec_json)

    def _spec_for(self, version: int) -> ServiceSpec:
        if version == self.row.version:
            return self.spec
        spec = self._old_specs.get(version)
        if spec is None:
            spec = self._old_specs[version] = self._load_spec(version)
        return spec

    # lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Re-adopt what a previous controller left running, then reconcile."""
        for replica in list(self.replicas.values()):
            rt = self.runtime.setdefault(replica.id, ReplicaRuntime())
            status = ReplicaStatus(replica.status)
            if replica.pid is not None and replica.port is not None:
                rt.handle = self.backend.adopt(replica.pid, replica.pid_create_time, replica.port)
            if status.is_live or status is ReplicaStatus.SHUTTING_DOWN:
                if rt.handle is None:
                    self._mark_failed(
                        replica, ReplicaStatus.FAILED, "gone while the controller was down"
                    )
                    continue
                rt.started_at = replica.launched_at
                if status is ReplicaStatus.SHUTTING_DOWN:
                    self._spawn(replica, self._retire(replica, "stopping (resumed)"))
                elif status in (ReplicaStatus.PENDING, ReplicaStatus.PROVISIONING):
                    self._mark_failed(
                        replica, ReplicaStatus.FAILED_PROVISION, "controller restarted"
                    )
                else:
                    self._spawn(replica, self._probe_loop(replica))
            elif rt.handle is not None:
                # Failed, and the previous controller died before its stop finished.
                self._spawn(replica, self._stop_failed(replica, rt.handle))
        self.lb.adopt(self.row.lb_pid, self.row.lb_create_time)
        if self.updating and self.update is not None and self.update.mode == "in_place":
            # The previous controller died mid-way: relabel what it had not, deliver again
            # (reconfigure is idempotent) and finish the update.
            old_spec = self._load_spec(self.update.from_version)
            relabelled = rollout.relabel(self, self.update.from_version, self.row.version)
            relabelled += [
                r
                for r in self.replicas.values()
                if ReplicaStatus(r.status).is_live
                and r.version == self.row.version
                and r not in relabelled
            ]
            rollout.spawn_update(
                self,
                rollout.deliver_in_place(
                    self, self.update, old_spec, self.update.from_version, relabelled
                ),
            )
        self._task = asyncio.create_task(self._loop(), name=f"reconcile-{self.name}")
        self._own_counts = asyncio.create_task(
            poll_own_counts(
                self.probe_session,
                self._count_targets,
                lambda: self.autoscaler.load,
                time.monotonic,
            ),
            name=f"own-counts-{self.name}",
        )

    def adopted_pids(self) -> set[int]:
        """Pids this runtime manages (replicas and the LB), for the orphan sweep."""
        pids = {
            rt.handle.pid
            for rt in self.runtime.values()
            if rt.handle is not None and rt.handle.pid is not None
        }
        if self.lb.handle is not None and self.lb.handle.pid is not None:
            pids.add(self.lb.handle.pid)
        return pids

    async def detach(self) -> None:
        """Stop managing (controller shutdown): replicas and the LB keep running."""
        if self._own_counts:
            self._own_counts.cancel()
        await self._stop_loop()
        for rt in self.runtime.values():
            for task in rt.tasks:
                task.cancel()
        self.lb.detach()

    async def take_down(self, purge: bool) -> None:
        """Stop the load balancer and every replica, then forget the service."""
        self._stopping = True
        old = self.row.status
        self.row.status = ServiceStatus.SHUTTING_DOWN.value
        # Recorded first, so a controller that dies mid-way finishes the down on restart.
        self.store.update_service(self.name, desired="down", purge=int(purge))
        self.store.set_service_status(self.name, old, self.row.status, "steady down")
        if self._own_counts:
            self._own_counts.cancel()
        await self._stop_loop()
        stops = [self.lb.stop()]
        for replica in list(self.replicas.values()):
            rt = self.runtime.get(replica.id)
            if rt is None:
                continue
            for task in rt.tasks:
                task.cancel()
            if rt.handle is not None:
                stops.append(
                    self.backend.stop(rt.handle, self.spec.service.graceful_shutdown_timeout_s)
                )
        await asyncio.gather(*stops, return_exceptions=True)
        self.store.delete_service(self.name, purge=purge)

    async def _stop_loop(self) -> None:
        """Cancel the reconcile loop, again if need be: before Python 3.12,
        ``asyncio.wait_for`` swallows a cancel that lands as the wake event fires
        (an update's wake just before a down), and the loop would run on."""
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

    # reconcile ---------------------------------------------------------
    def views(self) -> list[ReplicaView]:
        return [
            ReplicaView(r.id, r.version, ReplicaStatus(r.status)) for r in self.replicas.values()
        ]

    @property
    def updating(self) -> bool:
        return self.update is not None and self.update.status == IN_PROGRESS

    def tick(self) -> None:
        if self._stopping:
            return
        self.lb.supervise(self.store, self.row)
        self._reap_exited()
        if self.updating:
            failure = rollout.update_failure(self)
            if failure:
                rollout.roll_back(self, failure)
        self._autoscale()
        plan, converged = self._plan()
        if converged and self.updating:
            rollout.finish_update(
                self,
                SUCCEEDED,
                f"version {self.row.version} serves with {self.target_replicas()} replicas",
            )
        self.plan = plan
        self._publish(plan.routable)
        for replica_id, reason in plan.stop:
            replica = self.replicas[replica_id]
            self.store.set_replica_status(replica, ReplicaStatus.SHUTTING_DOWN.value, reason)
            self._spawn(replica, self._retire(replica, reason))
        for replica_id in plan.forget:
            replica = self.replicas.pop(replica_id)
            self.runtime.pop(replica_id, None)
            self.store.remove_replica(replica, "failed replica no longer listed")
        for _ in range(plan.launch):
            self._launch(self.row.version)
        self._update_status(plan)

    def _plan(self) -> tuple[Plan, bool]:
        """Steady state, or converging to ``row.version`` by the update's mode; and
        whether a restart update has converged (pure: the caller records it)."""
        version = self.row.version
        views = self.views()
        broken = version in self.broken_versions
        target = self.target_replicas()
        converging = any(v.status.is_live and v.version != version for v in views)
        in_place = self.updating and self.update is not None and self.update.mode == "in_place"
        if in_place or not (self.updating or converging):
            return plan_steady(target, version, views, version_broken=broken), False
        assert self.update is not None
        mode = self.update.mode if self.updating else "rolling"
        svc = self.spec.service
        step = plan_update(
            "blue_green" if mode == "blue_green" else "rolling",
            target,
            version,
            views,
            max_surge=svc.max_surge_count(target),
            max_unavailable=svc.max_unavailable_count(target),
        )
        plan = Plan(launch=0 if broken else step.launch, stop=step.drain, routable=step.routable)
        return plan, step.done

    # autoscaling hooks (the logic is in controller/autoscaler.py) -----
    def target_replicas(self) -> int:
        """The number of replicas the service aims for now: the autoscaler's target
        (a fixed ``replicas: N`` is a policy too). Steady plans and updates size to it."""
        return self.autoscaler.target()

    def _autoscale(self) -> None:
        self.autoscaler.set_policy(policy_for(self.spec.service))
        self.autoscaler.step(time.monotonic(), len(self.plan.routable))

    def scale_from_zero(self) -> int:
        """The load balancer holds a request and nothing serves: launch at once."""
        decision = self.autoscaler.request_waiting(time.monotonic())
        if decision.changed:
            self.wake()
        return decision.target

    def _record_scaling(self, reason: str) -> None:
        self.store.add_event(self.name, None, None, AUTOSCALE_EVENT, reason)

    def _live_current(self) -> int:
        return sum(
            1
            for r in self.replicas.values()
            if ReplicaStatus(r.status).is_live and r.version == self.row.version
        )

    def _count_targets(self) -> list[CountTarget]:
        """Python replicas whose own ongoing count the ongoing-requests policy reads."""
        if self.autoscaler.policy_name != "ongoing_requests":
            return []
        return [
            CountTarget(r.id, r.ip, r.control_port, self.control_headers(r))
            for r in self.replicas.values()
            if r.control_port is not None and r.status == ReplicaStatus.READY.value
        ]

    def _update_status(self, plan: Plan) -> None:
        status = service_status(
            shutting_down=self._stopping,
            lb_ready=self.lb.running and self.routes.polls_since_start > 0,
            target=self.target_replicas(),
            replicas=self.views(),
            routable=plan.routable,
            version_broken=self.row.version in self.broken_versions,
            updating=self.updating and bool(plan.routable),
        )
        if status.value != self.row.status:
            old = self.row.status
            self.row.status = status.value
            self.store.set_service_status(self.name, old, status.value, self._status_reason(status))

    def _status_reason(self, status: ServiceStatus) -> str:
        ready = len(self.plan.routable)
        if status is ServiceStatus.FAILED:
            return f"version {self.row.version} failed before any replica was ready"
        return f"{ready} ready of {self.target_replicas()} wanted"

    def _publish(self, routable: frozenset[int]) -> None:
        svc = self.spec.service
        replicas = [
            {"id": r.id, "version": r.version, "host": r.ip, "port": r.port}
            for r in sorted(self.replicas.values(), key=lambda r: r.id)
            if r.id in routable and r.status == ReplicaStatus.READY.value and r.port is not None
        ]
        self.routes.publish(
            {
                "policy": svc.load_balancing_policy,
                "max_ongoing_requests": svc.max_ongoing_requests,
                "max_queued_requests": svc.max_queued_requests,
                "replicas": replicas,
                "blocked_paths": _blocked_paths(self.spec),
                "load_balancer": svc.load_balancer.model_dump(),
                "request_timeout_s": svc.request_timeout_s,
                # Scale to zero: the LB holds requests that arrive at zero this long.
                "hold_at_zero_s": svc.cold_start_timeout_s if self.autoscaler.allows_zero else 0,
                "access_log": svc.access_log,
            }
        )

    def _routable_now(self) -> frozenset[int]:
        return frozenset(
            r.id for r in self.replicas.values() if r.status == ReplicaStatus.READY.value
        )

    def _reap_exited(self) -> None:
        for replica in list(self.replicas.values()):
            status = ReplicaStatus(replica.status)
            rt = self.runtime.get(replica.id)
            if not status.is_live or rt is None or rt.handle is None:
                continue
            code = rt.handle.exit_code()
            if code is None:
                continue
            before_ready = status in (ReplicaStatus.STARTING, ReplicaStatus.PROVISIONING)
            reason = f"process exited with code {code}" + (
                " before it was ready" if before_ready else ""
            )
            self._mark_failed(replica, ReplicaStatus.FAILED, reason)
            if before_ready:
                self._judge_version(replica.version)

    def _judge_version(self, version: int) -> None:
        """SkyServe's rule: failing before any replica of the version was ready means broken."""
        if version not in self.ready_versions and version not in self.broken_versions:
            self.broken_versions.add(version)
            self.store.add_event(
                self.name,
                None,
                None,
                "VERSION_BROKEN",
                f"version {version} failed before any replica was ready; not relaunching",
            )

    # replica lifecycle -------------------------------------------------
    def _spawn(self, replica: ReplicaRow, coro: object) -> None:
        rt = self.runtime.setdefault(replica.id, ReplicaRuntime())
        task: asyncio.Task[None] = asyncio.create_task(coro)  # type: ignore[arg-type]
        rt.tasks.append(task)
        task.add_done_callback(lambda t: rt.tasks.remove(t) if t in rt.tasks else None)

    def _launch(self, version: int) -> None:
        replica_id = self.store.take_replica_id(self.name)
        replica = ReplicaRow(
            service=self.name,
            id=replica_id,
            version=version,
            status=ReplicaStatus.PENDING.value,
            launched_at=time.time(),
        )
        self.store.add_replica(replica, f"launching to reach {self.target_replicas()} replicas")
        self.replicas[replica_id] = replica
        self.runtime[replica_id] = ReplicaRuntime()
        self._spawn(replica, self._provision_and_start(replica))

    def _replica_env(
        self,
        replica: ReplicaRow,
        spec: ServiceSpec,
        port: int,
        control_port: int | None,
        control_secret: str | None = None,
    ) -> dict[str, str]:
        """A clean environment: the contract's base variables, the file's ``envs``,
        then the documented variables (so ``envs`` cannot fake a replica's identity).
        Nothing else of the controller's environment, its token above all."""
        env = contract.base_env(os.environ)
        env.update(spec.envs)
        env.update(
            {
                contract.PORT: str(port),
                contract.REPLICA_ID: str(replica.id),
                contract.SKYPILOT_REPLICA_ID: str(replica.id),
                contract.SERVICE_NAME: self.name,
                contract.SERVICE_VERSION: str(replica.version),
                contract.REPLICA_TAG: contract.replica_tag(self.home.root, self.name, replica.id),
            }
        )
        if control_port is not None:  # a Python replica: the runner's own settings
            svc = spec.service
            env[contract.CONTROL_PORT] = str(control_port)
            env[contract.MAX_ONGOING_REQUESTS] = str(svc.max_ongoing_requests)
            env[contract.HEALTH_CHECK_TIMEOUT_S] = str(svc.health_check_timeout_s)
            env[contract.GRACEFUL_SHUTDOWN_TIMEOUT_S] = str(svc.graceful_shutdown_timeout_s)
            env[contract.GRACEFUL_SHUTDOWN_WAIT_LOOP_S] = str(svc.graceful_shutdown_wait_loop_s)
            if svc.user_config is not None:
                env[contract.USER_CONFIG] = json.dumps(svc.user_config)
            if control_secret is not None:
                env[contract.CONTROL_SECRET] = control_secret
            # rsapi hook: handles (steadyserve.serve) read the callees' route tables.
            env[contract.CONTROLLER_FILE] = str(self.home.controller_file)
            env[contract.GRAPH_SECRET] = contract.graph_secret(self.home.root)
            env[contract.ROUTES_TOKEN] = contract.routes_token(self.home.root)
        return env

    def control_headers(self, replica: ReplicaRow) -> dict[str, str]:
        """What every request to a Python replica's control port carries."""
        return {contract.CONTROL_SECRET_HEADER: self._control_secret(replica)}

    def _control_secret(self, replica: ReplicaRow) -> str:
        return contract.control_secret(self.home.root, self.name, replica.id, replica.launched_at)

    def _command(self, spec: ServiceSpec) -> list[str]:
        if spec.run is not None:
            return ["bash", "-c", spec.run]
        assert spec.import_path is not None
        return [sys.executable, "-m", "steadyserve.replica", spec.import_path]

    async def _provision_and_start(self, replica: ReplicaRow) -> None:
        try:
            handle, control_port = await self._provision(replica)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # whatever it is, the replica fails visibly, never stuck
            if ReplicaStatus(replica.status) not in (
                ReplicaStatus.PENDING,
                ReplicaStatus.PROVISIONING,
            ):
                return  # stopped or failed meanwhile: that outcome stands
            log.warning("launching replica %s/%s failed", self.name, replica.id, exc_info=True)
            message = str(exc) if isinstance(exc, ProvisionError) else _one_line(exc)
            self._mark_failed(replica, ReplicaStatus.FAILED_PROVISION, message)
            self._judge_version(replica.version)
            self.wake()
            return
        if handle is None:
            return
        rt = self.runtime.setdefault(replica.id, ReplicaRuntime())
        rt.handle = handle
        rt.started_at = time.time()
        self.store.set_replica_status(
            replica,
            ReplicaStatus.STARTING.value,
            f"process started (pid {handle.pid}, port {handle.port})",
            pid=handle.pid,
            pid_create_time=handle.create_time,
            port=handle.port,
            control_port=control_port,
        )
        await self._probe_loop(replica)

    async def _provision(self, replica: ReplicaRow) -> tuple[ReplicaHandle | None, int | None]:
        """Prepare the version and start the process; None if the replica was
        stopped meanwhile. Any exception is the caller's to turn into FAILED_PROVISION."""
        spec = self._spec_for(replica.version)
        self.store.set_replica_status(
            replica, ReplicaStatus.PROVISIONING.value, "preparing workdir"
        )
        port = free_port()
        control_port = free_port() if spec.import_path is not None else None
        secret = self._control_secret(replica) if control_port is not None else None
        env = self._replica_env(replica, spec, port, control_port, secret)
        # setup is user code too: it never sees the control secret.
        hidden = (contract.CONTROL_SECRET, contract.GRAPH_SECRET)  # graph secret: rsapi hook
        setup_env = {k: v for k, v in env.items() if k not in hidden}
        workdir = await self.backend.prepare(self.name, replica.version, spec.setup, setup_env)
        if replica.status != ReplicaStatus.PROVISIONING.value:
            return None, None
        handle = await self.backend.launch(
            LaunchRequest(
                service=self.name,
                version=replica.version,
                replica_id=replica.id,
                command=self._command(spec),
                env=env,
                workdir=workdir,
                log_path=self.home.replica_log(self.name, replica.id),
            )
        )
        return handle, control_port

    async def _probe_loop(self, replica: ReplicaRow) -> None:
        svc = self.spec.service
        interval = STARTING_PROBE_MIN_S
        while ReplicaStatus(replica.status) in (
            ReplicaStatus.STARTING,
            ReplicaStatus.READY,
            ReplicaStatus.NOT_READY,
        ):
            spec = self._spec_for(replica.version)
            probe, port = self._probe_target(replica, spec)
            ok, why = await probe_ready(self.probe_session, replica.ip, port, probe)
            if not ReplicaStatus(replica.status).is_live:
                return
            if (
                ok
                and replica.status == ReplicaStatus.STARTING.value
                and replica.control_port is None
                and spec.service.user_config is not None
            ):
                ok, why = await rollout.deliver_user_config(self, replica, replace_on_refusal=True)
                if not ok:
                    self._judge_version(replica.version)
                    return
            self._on_probe(replica, ok, why)
            if replica.status == ReplicaStatus.STARTING.value:
                interval = min(interval * 1.5, svc.health_check_period_s)
                await asyncio.sleep(interval)
            else:
                await asyncio.sleep(svc.health_check_period_s)

    def _probe_target(self, replica: ReplicaRow, spec: ServiceSpec) -> tuple[ReadinessProbe, int]:
        """Command replicas: the file's readiness probe. Python replicas: the runner's
        health endpoint, which also runs check_health() within health_check_timeout_s."""
        if replica.control_port is None:
            assert replica.port is not None
            return spec.service.readiness_probe, replica.port
        probe = ReadinessProbe(
            path=CONTROL_HEALTH,
            initial_delay_seconds=spec.service.readiness_probe.initial_delay_seconds,
            # A little past the runner's own check_health() bound, so its clear
            # "unhealthy" answer arrives before the probe gives up.
            timeout_seconds=spec.service.health_check_timeout_s + 2.0,
            headers=self.control_headers(replica),
        )
        return probe, replica.control_port

    def _on_probe(self, replica: ReplicaRow, ok: bool, why: str) -> None:
        rt = self.runtime.setdefault(replica.id, ReplicaRuntime())
        status = ReplicaStatus(replica.status)
        probe = self.spec.service.readiness_probe
        if ok:
            rt.failed_probes = 0
            if status in (ReplicaStatus.STARTING, ReplicaStatus.NOT_READY):
                extra = {"ready_at": time.time()} if replica.ready_at is None else {}
                self.store.set_replica_status(
                    replica, ReplicaStatus.READY.value, "readiness probe passed", **extra
                )
                self.ready_versions.add(replica.version)
                self.broken_versions.discard(replica.version)
                self.wake()
            return
        if status is ReplicaStatus.STARTING:
            started = rt.started_at or replica.launched_at
            if time.time() - started > probe.initial_delay_seconds:
                self._mark_failed(
                    replica,
                    ReplicaStatus.FAILED_INITIAL_DELAY,
                    f"not ready after initial_delay_seconds={probe.initial_delay_seconds}: {why}",
                )
                self._judge_version(replica.version)
                self.wake()
            return
        rt.failed_probes += 1
        if rt.failed_probes >= FAILED_PROBES_TO_REPLACE:
            self._mark_failed(
                replica,
                ReplicaStatus.FAILED_PROBING,
                f"{rt.failed_probes} probes failed in a row: {why}",
            )
        elif status is ReplicaStatus.READY:
            self.store.set_replica_status(replica, ReplicaStatus.NOT_READY.value, why)
            self._publish(self._routable_now())
        self.wake()

    def _mark_failed(self, replica: ReplicaRow, status: ReplicaStatus, reason: str) -> None:
        """Take a replica out of routing at once, stop its process, keep it listed."""
        if self.updating and self.update is not None and replica.version == self.update.to_version:
            self.update_failures += 1
        self.store.set_replica_status(replica, status.value, reason)
        self._publish(self._routable_now())
        rt = self.runtime.setdefault(replica.id, ReplicaRuntime())
        current = asyncio.current_task()
        for task in rt.tasks:
            if task is not current:
                task.cancel()
        if rt.handle is not None:
            handle = rt.handle
            asyncio.get_running_loop().create_task(self._stop_failed(replica, handle))
        self.wake()

    async def _stop_failed(self, replica: ReplicaRow, handle: ReplicaHandle) -> None:
        await self.backend.stop(handle, self.spec.service.graceful_shutdown_timeout_s)
        if replica.id in self.replicas:
            self.store.update_replica(self.name, replica.id, pid=None)
            replica.pid = None

    async def _retire(self, replica: ReplicaRow, reason: str) -> None:
        """Drain (out of routing, LB acknowledged, nothing in flight), then stop and forget."""
        svc = self.spec.service
        removed_in = self.routes.version
        deadline = time.monotonic() + svc.graceful_shutdown_timeout_s
        while self.lb.running and not self.routes.drained(replica.id, removed_in):
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(
                min(svc.graceful_shutdown_wait_loop_s, max(0.0, deadline - time.monotonic()))
            )
        rt = self.runtime.get(replica.id)
        if rt is not None and rt.handle is not None:
            await self.backend.stop(rt.handle, svc.graceful_shutdown_timeout_s)
        self.replicas.pop(replica.id, None)
        self.runtime.pop(replica.id, None)
        self.store.remove_replica(replica, reason)
        self.wake()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line[:500]


def _blocked_paths(spec: ServiceSpec) -> list[str]:
    """Control paths clients must never reach through the load balancer: a command
    replica's reconfigure_path; a Python replica's handle-call path (rsapi hook)."""
    reconfigure_path = spec.service.reconfigure_path
    blocked = [reconfigure_path] if reconfigure_path else []
    if spec.import_path is not None:
        blocked.append(contract.HANDLE_CALL_PATH)
    return blocked
