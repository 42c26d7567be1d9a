"""The controller process: one per ``STEADY_HOME``, started on demand by the CLI.

It holds an exclusive lock on ``controller.lock`` for its whole life, so two
CLIs racing to start it end with one controller; it records its address in
``controller.json`` (pid, url) for the CLI and the load balancers.

Commands that make a version (up, update, rollback) hold their service's lock
from validation to the start of the rollout: a second one meanwhile answers 409
at once rather than share a version number; a down waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import sqlite3
import uuid
from pathlib import Path
from typing import Any

from steadyserve import port_range
from steadyserve.backends import backend_name, choose_backend
from steadyserve.backends.base import Backend
from steadyserve.compat.skypilot import not_applicable_notes
from steadyserve.controller import (
    backups,
    fleet,
    recovery,
    replica_logs,
    routes_socket,
    startup,
    updates,
)
from steadyserve.controller.api import build_app
from steadyserve.controller.capacity import CapacityPool
from steadyserve.controller.clock import SYSTEM_CLOCK, Clock
from steadyserve.controller.endpoint import (
    EndpointClaims,
    endpoint_port,
    port_notice,
)
from steadyserve.controller.errors import BadInput, Conflict, NotFound
from steadyserve.controller.freed_names import free_name
from steadyserve.controller.gateway import GatewaySupervisor
from steadyserve.controller.listen import api_host, listen
from steadyserve.controller.orphans import MACHINE
from steadyserve.controller.pool_runtime import runtime_class, same_kind
from steadyserve.controller.probes import new_probe_session
from steadyserve.controller.process_port import ProcessPort
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.controller.status import service_json
from steadyserve.core.states import EventKind, ServiceStatus, UpdateMode, VersionOutcome
from steadyserve.envs.workdir import relative_excludes
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.spec.machine import this_inventory
from steadyserve.store import ReplicaRow, ServiceRow, Store, VersionRow

log = logging.getLogger("steadyserve.controller")


class Controller:
    machine: ProcessPort = MACHINE
    """Where the home's processes are found at start (recovery, the orphan sweep)."""

    def __init__(self, home: Home, clock: Clock = SYSTEM_CLOCK) -> None:
        self.home = home
        self.clock = clock
        self.store = Store(home.db_path)
        self.backend: Backend = choose_backend(home)
        self.backend_name = backend_name()
        self.epoch = uuid.uuid4().hex[:12]
        # Each service runtime made in this controller's life numbers its tables
        # from 1 under an epoch of its own: a service deleted and made again under
        # its name reaches the version a handle or the gateway last knew of the old
        # one, and a shared epoch let them take the new table for the old.
        self._incarnations = itertools.count(1)
        self.services: dict[str, ServiceRuntime] = {}
        self.started_at = clock.wall()
        self.log_limits = replica_logs.LogLimits.from_env()
        self.url = ""
        self._stop = asyncio.Event()
        self._stop_gateway = False
        self._down_tasks: dict[str, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.endpoints = EndpointClaims()
        """Endpoint ports of this controller's services, claimed against other homes'."""
        self._resumed_downs: list[asyncio.Task[None]] = []
        # The gateway port (Ray Serve's http_options.port).
        self.gateway = GatewaySupervisor(
            home,
            self.epoch,
            lambda: [r.spec for r in self.services.values()],
            lambda name: rt.routes if (rt := self.services.get(name)) else None,
        )
        # One machine's GPUs, cores and fixed ports for every service (a Ray cluster
        # places its actors itself: nothing is divided here then).
        places = self.backend.places
        self.capacity = CapacityPool(
            this_inventory(gpus=places),
            self._all_replicas,
            places=places,
            isolates=self.backend.isolation_unavailable() is None,
        )

    def _all_replicas(self) -> list[ReplicaRow]:
        return [r for rt in list(self.services.values()) for r in rt.replicas.values()]

    def info(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "url": self.url,
            "home": str(self.home.root),
            "epoch": self.epoch,
            "started_at": self.started_at,
            "backend": self.backend_name,
            "ports": str(found) if (found := port_range.from_env()) else None,
        }

    # service operations (called by the API) ---------------------------
    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _claim(self, name: str) -> asyncio.Lock:
        """The service's command lock, or 409 when another command holds it."""
        lock = self._lock(name)
        if lock.locked():
            raise Conflict(
                f"service {name!r} is busy with another command; run this one when it is done"
            )
        return lock

    def known(self, name: str) -> bool:
        """Whether ``name`` runs, or was taken down and kept its history (False:
        404). Running or not is for the caller to say."""
        if name in self.services:
            return True
        if self.store.has_history(name):
            return False
        raise NotFound(f"unknown service: {name}")

    def runtime(self, name: str) -> ServiceRuntime:
        runtime = self.services.get(name)
        if runtime is None:
            raise NotFound(f"unknown service: {name}")
        return runtime

    def status(self, names: list[str]) -> list[dict[str, Any]]:
        for name in names:
            self.runtime(name)
        chosen = names or list(self.services)
        return [service_json(self.services[n]) for n in chosen]

    async def create_service(
        self, spec_json: str, spec_yaml: str, spec_file: str | None = None, owner: str = ""
    ) -> dict[str, Any]:
        spec = self._parse(spec_json)
        name = spec.name
        self._check_placeable(spec)
        if name is None:
            raise BadInput("name: a service needs a name")
        if name in self.services or self.store.service(name) is not None:
            raise Conflict(f"service {name!r} already exists (use 'steady update' to change it)")
        if self._lock(name).locked():
            raise Conflict(f"service {name!r} already exists (another 'steady up' is creating it)")
        async with self._claim(name):
            return await self._create(name, spec, spec_yaml, spec_file, owner)

    async def _create(
        self, name: str, spec: ServiceSpec, spec_yaml: str, spec_file: str | None, owner: str
    ) -> dict[str, Any]:
        # Chosen and claimed at once (no await between): a create running beside this
        # one, here or in another home, must not choose the same port.
        port = self.endpoints.choose(self.store, spec.service.port)
        try:
            return await self._create_on(port, name, spec, spec_yaml, spec_file, owner)
        except BaseException:
            if self._forgotten(name):
                self.endpoints.release(port)
                with contextlib.suppress(sqlite3.Error):  # the first error is the one to say
                    if not self.store.has_history(name):  # a new name leaves no folder
                        await asyncio.to_thread(shutil.rmtree, self.home.service_dir(name), True)
            raise

    async def _create_on(
        self,
        port: int,
        name: str,
        spec: ServiceSpec,
        spec_yaml: str,
        spec_file: str | None,
        owner: str,
    ) -> dict[str, Any]:
        source = Path(spec.workdir) if spec.workdir else None
        exclude = relative_excludes(source, [spec_file] if spec_file else [])
        # Refused roots, special files, size: checked before anything is taken.
        expected = (
            await updates.hash_workdir(source, exclude, self.home) if source is not None else None
        )
        notes = await free_name(self.store, self.home, name)
        number = 1
        workdir_hash = await updates.take_snapshot(
            self.home, name, number, source, exclude, expected
        )
        now = self.clock.wall()
        row = ServiceRow(
            name=name,
            status=ServiceStatus.CONTROLLER_INIT,
            version=number,
            created_at=now,
            port=port,
            # Past any replica of the name that left a log: a stray of it may run (its
            # service lost with a restored state) and must not share a new one's tag.
            next_replica_id=max(
                self.store.next_free_replica_id(name), recovery.top_logged_id(self.home, name) + 1
            ),
            stable_version=number,
            owner=owner,
        )
        version = VersionRow(
            service=name,
            version=number,
            created_at=now,
            spec_json=spec.spec_json(),
            spec_yaml=spec_yaml,
            workdir_hash=workdir_hash,
            mode=UpdateMode.INITIAL,
            changes="initial version",
            outcome=VersionOutcome.ACTIVE,
        )
        try:
            self.store.add_service(row, version)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, self.home.version_dir(name, number), True)
            raise
        runtime = self._new_runtime(row)
        runtime.start()
        for note in not_applicable_notes(spec):  # named once, as an event
            self.store.add_event(name, None, None, EventKind.NOT_APPLICABLE, note)
        await updates.prune(self.store, self.home, runtime, spec.service.history_limit)
        return {
            "name": name,
            "endpoint": f"127.0.0.1:{port}",
            "notice": port_notice(self.store, port) if spec.service.port is None else None,
            "notes": notes,
        }

    async def update_service(
        self,
        name: str,
        spec_json: str,
        spec_yaml: str,
        *,
        mode: str | None,
        dry_run: bool,
        source_workdir: Path | None = None,
        rollback_to: int | None = None,
        spec_file: str | None = None,
        keep_files: bool = False,
    ) -> dict[str, Any]:
        """Make a new version from a spec: in place when the classifier allows, else by mode."""
        runtime = self.runtime(name)
        if name in self._down_tasks:
            raise Conflict(f"service {name!r} is shutting down")
        spec = self._parse(spec_json)
        if spec.name != name:
            spec = spec.model_copy(update={"name": name})
        self._check_placeable(spec)
        same_kind(runtime.spec, spec, name)
        if dry_run:  # writes nothing: no need to wait for, or refuse on, another command
            return await updates.apply(
                self,
                runtime,
                spec,
                spec_yaml,
                mode=mode,
                dry_run=True,
                source_workdir=source_workdir,
                rollback_to=rollback_to,
                spec_file=spec_file,
                keep_files=keep_files,
            )
        async with self._claim(name):
            self._still_up(name, runtime)
            return await updates.apply(
                self,
                runtime,
                spec,
                spec_yaml,
                mode=mode,
                dry_run=False,
                source_workdir=source_workdir,
                rollback_to=rollback_to,
                spec_file=spec_file,
                keep_files=keep_files,
            )

    def _still_up(self, name: str, runtime: ServiceRuntime) -> None:
        if name in self._down_tasks or self.services.get(name) is not runtime:
            raise Conflict(f"service {name!r} is shutting down")

    async def rollback(self, name: str, to: int | None, dry_run: bool) -> dict[str, Any]:
        runtime = self.runtime(name)
        if name in self._down_tasks:
            raise Conflict(f"service {name!r} is shutting down")
        if dry_run:
            return await self._rollback(name, runtime, to, dry_run=True)
        async with self._claim(name):
            self._still_up(name, runtime)
            return await self._rollback(name, runtime, to, dry_run=False)

    async def _rollback(
        self, name: str, runtime: ServiceRuntime, to: int | None, *, dry_run: bool
    ) -> dict[str, Any]:
        target = updates.rollback_target(self.store, runtime, to)
        spec = ServiceSpec.from_json(target.spec_json)
        return await updates.apply(
            self,
            runtime,
            spec,
            target.spec_yaml,
            mode=None,
            dry_run=dry_run,
            source_workdir=self.home.version_workdir(name, target.version),
            rollback_to=target.version,
        )

    async def deploy(
        self,
        items: list[tuple[str, str]],
        dry_run: bool,
        spec_file: str | None = None,
        *,
        prune_all: bool = False,
        expect_down: list[str] | None = None,
        gateway_port: int | None = None,
        gateway_timeout: float | None = None,
    ) -> dict[str, Any]:
        """A fleet file as the whole desired state (controller/fleet.py)."""
        return await fleet.deploy(
            self,
            items,
            dry_run,
            spec_file,
            prune_all=prune_all,
            expect_down=expect_down,
            gateway_port=gateway_port,
            gateway_timeout=gateway_timeout,
        )

    def _parse(self, spec_json: str) -> ServiceSpec:
        try:
            return ServiceSpec.from_json(spec_json)
        except ValueError as exc:
            raise BadInput(str(exc).splitlines()[0]) from exc

    def _check_placeable(self, spec: ServiceSpec) -> None:
        """What the backend can tell before anything starts (e.g. the Ray backend: more
        fixed-port replicas than nodes): refused with one line, exit 2."""
        check = getattr(self.backend, "placement_problem", None)
        problem = check(spec) if check is not None else None
        if problem:
            raise BadInput(problem)

    async def _check_new(self, spec: ServiceSpec, spec_file: str | None) -> None:
        if spec.workdir is not None:
            source = Path(spec.workdir)
            exclude = relative_excludes(source, [spec_file] if spec_file else [])
            try:
                await updates.hash_workdir(source, exclude, self.home)
            except BadInput as exc:
                raise BadInput(f"{spec.name}: {exc}") from exc
        if spec.service.port is not None:
            endpoint_port(self.store, spec.service.port)

    def _new_runtime(self, row: ServiceRow) -> ServiceRuntime:
        runtime = runtime_class(self.store, row)(  # a pool's, or a service's
            self.home,
            self.store,
            self.backend,
            self.probe_session,
            f"{self.epoch}.{next(self._incarnations)}",
            row,
            clock=self.clock,
            capacity=self.capacity,
        )
        self.services[row.name] = runtime
        return runtime

    async def delete_service(self, name: str, purge: bool) -> None:
        if purge and name not in self.services and self.store.has_history(name):
            # Already down: --purge forgets what the down kept (versions, events, logs).
            async with self._claim(name):
                self.store.delete_service(name, purge=True)
                await asyncio.to_thread(
                    shutil.rmtree, self.home.service_dir(name), ignore_errors=True
                )
            return
        runtime = self.runtime(name)
        task = self._down_tasks.get(name)
        if task is None:
            task = asyncio.create_task(self._take_down(name, runtime, purge))
            self._down_tasks[name] = task
        await asyncio.shield(task)

    async def _take_down(self, name: str, runtime: ServiceRuntime, purge: bool) -> None:
        try:
            # A command making a version finishes first, so its version ends "cancelled"
            # (not "in progress" forever) and a purge does not delete files under it.
            async with self._lock(name):
                await runtime.take_down(purge)
                if purge:  # logs and version workdirs go with the history
                    await asyncio.to_thread(
                        shutil.rmtree, self.home.service_dir(name), ignore_errors=True
                    )
        finally:
            self._down_tasks.pop(name, None)
            # Memory follows the disk: a down that failed (a full disk) keeps it managed.
            if self._forgotten(name):
                self.services.pop(name, None)
                runtime.routes.close()  # its open route polls answered now, not at timeout
                self.capacity.changed()  # its GPUs are free for the others
                self.endpoints.release(runtime.row.port)  # and its port

    def _forgotten(self, name: str) -> bool:
        try:
            return self.store.service(name) is None
        except sqlite3.Error:  # cannot tell: keep managing it
            return False

    def shutdown(self, stop_gateway: bool = False) -> None:
        """Exit; services keep serving (the gateway too, unless ``stop_gateway``)."""
        self._stop_gateway = self._stop_gateway or stop_gateway
        self._stop.set()

    # process lifecycle ------------------------------------------------
    async def serve(self) -> None:
        self.probe_session = new_probe_session()
        token = os.environ.get("STEADY_TOKEN") or None
        runner, self.url = await listen(build_app(self, token), api_host(token))
        routes_runner = await routes_socket.start(self)  # for replicas in their own netns
        known, claimed = startup.take_over(self, ServiceRuntime.start)
        claimed |= self.gateway.pids
        gateway_task = asyncio.create_task(self.gateway.run())
        logs_task = asyncio.create_task(replica_logs.rotate_forever(self.home, self.log_limits))
        backup_task = await startup.sweep(self, known, claimed)
        self._write_info()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.shutdown)
        log.info("controller %s listening on %s", os.getpid(), self.url)
        await self._stop.wait()
        for runtime in list(self.services.values()):
            await runtime.detach()
        gateway_task.cancel()
        backup_task.cancel()
        logs_task.cancel()
        await self.gateway.leave(self._stop_gateway)
        await runner.cleanup()
        await routes_socket.stop(self, routes_runner)
        await self.probe_session.close()
        await asyncio.to_thread(backups.take, self.store, self.home)  # what a restart finds
        self.store.close()
        info = self.home.read_controller_info()
        if info and info.get("pid") == os.getpid():
            self.home.controller_file.unlink(missing_ok=True)

    def _claimed_namespaces(self) -> set[str]:
        """The network namespaces of replicas this controller manages: the backend
        reaps the rest."""
        held = (h.handle for r in self.services.values() for h in r.held.values())
        return {name for h in held if (name := getattr(h, "netns", None)) is not None}

    def _write_info(self) -> None:
        tmp = self.home.controller_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(self.info(), handle)
        tmp.replace(self.home.controller_file)
