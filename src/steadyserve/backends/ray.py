"""Replicas as Ray actors on an existing Ray cluster (``--backend ray``).

Each replica is one named, detached :class:`~steadyserve.backends.ray_actor.ReplicaActor`
spread over the nodes (Ray's ``SPREAD`` strategy, as Ray Serve spreads its
replicas) and placed with the service's resources. The version's workdir
travels with Ray's ``runtime_env`` (``working_dir``); the actor starts the
replica as the local backend would and reports the node address and port it
chose. The controller and the load balancers stay on this machine and route to
node addresses.

Liveness is a poll of the actor every :data:`POLL_S`; when the actor is gone
because its node died, the handle says so (:attr:`RayReplica.preempted`) and the
controller replaces the replica elsewhere. The replica's output is copied from
its node into the usual log file on the same poll, so ``steady logs`` works for
a replica on any node. Actors are named after the home, service and replica id,
so a restarted controller finds them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from steadyserve.backends import netns
from steadyserve.backends.base import AdoptRequest, LaunchRequest, ProvisionError
from steadyserve.backends.ray_placement import Placement, placement_of, unsatisfiable
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.spec.ports import fixed_port
from steadyserve.wire import replica_contract as contract

log = logging.getLogger(__name__)

NAMESPACE = "steadyserve"
POLL_S = 0.5
CALL_TIMEOUT_S = 10.0
FINAL_LOG_CHUNKS = 64
"""Pieces of a stopped replica's output copied at most (64 x 256 KiB = 16 MiB):
more is left on its node, not deleted."""
REACH_TIMEOUT_S = 3.0
START_TIMEOUT_S = 120.0
FIXED_PORT_WAIT_S = 30.0  # how long a launch waits for a stopping replica to free its port


class BackendUnavailable(Exception):
    """The Ray backend cannot be used (Ray missing, cluster unreachable): one line."""


def connect(address: str) -> None:
    """Join the cluster at ``address`` as a driver, or raise one line saying what to do."""
    try:
        import ray
    except ImportError:
        raise BackendUnavailable(
            "the ray backend needs Ray: pip install 'steadyserve[ray]'"
        ) from None
    if ray.is_initialized():
        return
    _check_reachable(address)
    try:
        ray.init(
            address=address,
            namespace=NAMESPACE,
            logging_level=logging.WARNING,
            log_to_driver=False,
            configure_logging=False,
        )
    except Exception as exc:  # Ray raises several kinds; all mean "not reachable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendUnavailable(
            f"cannot reach the Ray cluster at {address!r} ({first[:160]});"
            " start one with 'ray start --head' or set STEADY_RAY_ADDRESS"
        ) from None


def _check_reachable(address: str) -> None:
    """Fail in seconds, with one line, when nothing listens at a ``HOST:PORT`` or
    ``ray://HOST:PORT`` address (``ray.init`` itself retries for a long while)."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise BackendUnavailable(
            f"cannot reach the Ray cluster at {address!r} ({exc.strerror or exc});"
            " start one with 'ray start --head' or set STEADY_RAY_ADDRESS"
        ) from None


def actor_name(home_id: str, service: str, replica_id: int) -> str:
    return f"steady-{home_id}-{service}-{replica_id}"


class RayReplica:
    """The controller's view of one replica actor."""

    def __init__(self, actor: Any, name: str, info: dict[str, Any], log_path: Path) -> None:
        self.actor = actor
        self.name = name
        self._host = str(info["host"])
        ports = info.get("ports", {})
        self._port = int(ports.get(contract.PORT, info.get("port", 0)))
        control = ports.get(contract.CONTROL_PORT)
        self._control_port = int(control) if control is not None else None
        self._pid = int(info["pid"]) if info.get("pid") is not None else None
        self.node_id = str(info.get("node_id", ""))
        self.hostname = str(info.get("hostname", ""))
        self.log_path = log_path
        self.log_offset = 0
        self._exit: int | None = None
        self.preempted = False
        self.stopping = False
        """Set when the controller starts stopping it (it may still hold its port)."""
        """True when the actor died with its node: the replica was lost, not failed."""
        self._poller: asyncio.Task[None] | None = None
        self.resources = str(info.get("resources") or "Ray(cpus=1)")
        """The RESOURCES column: what the actor asked Ray for, and the GPU ids it got."""
        self.gpu_ids = tuple(str(i) for i in info.get("gpu_ids") or ())
        """The GPU ids Ray assigned the actor (``ray.get_gpu_ids()``), as its replica sees them."""

    @property
    def pid(self) -> int | None:
        return self._pid  # on the replica's node, not this one

    @property
    def create_time(self) -> float | None:
        return None

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def control_port(self) -> int | None:
        return self._control_port

    @property
    def region(self) -> str:
        """The node, for the REGION column: its hostname, or its Ray id shortened."""
        short = self.node_id[:8]
        return f"{self.hostname}:{short}" if self.hostname and short else self.hostname or short

    def exit_code(self) -> int | None:
        return self._exit

    def watch(self) -> None:
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll_loop())

    async def _poll_loop(self) -> None:
        from ray.exceptions import GetTimeoutError, RayActorError

        while self._exit is None:
            try:
                code = await asyncio.wait_for(self.actor.poll.remote(), CALL_TIMEOUT_S)
                await self._copy_log()
            except (RayActorError, asyncio.CancelledError) as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                self.preempted = True
                self._exit = -9
                return
            except (TimeoutError, GetTimeoutError):
                continue  # a node that is slow to answer is judged by Ray, not by us
            if code is not None:
                await self._copy_log()
                self._exit = int(code)
                return
            await asyncio.sleep(POLL_S)

    async def _copy_log(self) -> int:
        """Copy the next piece of the replica's output; its size (0: all copied)."""
        chunk: bytes = await self.actor.read_log.remote(self.log_offset)
        if chunk:
            with open(self.log_path, "ab") as handle:
                handle.write(chunk)
            self.log_offset += len(chunk)
        return len(chunk)

    async def copy_rest(self) -> bool:
        """Copy what is left of a stopped replica's output (bounded); whether all of it was."""
        for _ in range(FINAL_LOG_CHUNKS):
            if not await self._copy_log():
                return True
        return False

    def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()


class RayBackend:
    """Run replicas as actors on the Ray cluster at ``address``."""

    places = False

    def isolation_unavailable(self) -> str | None:
        return "service.isolation is for the local backend (not ray)"

    def reap_isolation(self, keep: set[str]) -> None:
        # Ray's replicas get no namespace; what a local run of this home left goes.
        netns.reap(self.home.root, keep)
        netns.reap_deleted_homes(self.home.root)

    def __init__(self, home: Home, address: str) -> None:
        self.home = home
        self.address = address
        self.home_id = contract.home_id(home.root)
        self._uploaded: dict[str, dict[str, Any]] = {}
        self._fixed: dict[tuple[str, int], str] = {}
        """(service, replica id) -> the node of each replica that binds a fixed port."""
        self._fixed_replicas: dict[tuple[str, int], RayReplica] = {}
        """The started ones among them: a replica whose process has exited frees its
        node's port at once, before the controller's stop of it is done."""
        connect(address)

    async def prepare(
        self,
        service: str,
        version: int,
        setup: str | None,
        env: dict[str, str],
        pip: list[str] | str | None = None,
    ) -> Path:
        """The version's workdir here; it travels to nodes with each actor's
        runtime_env, and ``setup`` runs on each node before its first replica."""
        workdir = self.home.version_workdir(service, version)
        if not workdir.is_dir():
            raise ProvisionError(f"workdir of version {version} is missing: {workdir}")
        return workdir

    async def launch(self, request: LaunchRequest) -> RayReplica:
        import ray

        placement: Placement = placement_of(request.resources) if request.resources else Placement()
        nodes = await asyncio.to_thread(_alive_node_resources)
        problem = unsatisfiable(placement.needs(), nodes)
        if problem is not None:
            raise ProvisionError(f"resources: {problem}; no node of the Ray cluster can hold it")
        from steadyserve.backends.ray_actor import ReplicaActor

        runtime_env = await self._shipped(request)

        name = actor_name(self.home_id, request.service, request.replica_id)
        strategy: Any = "SPREAD"
        if request.fixed_port is not None:
            strategy = await self._fixed_port_strategy(request)
        remote_cls: Any = ray.remote(ReplicaActor)
        actor: Any = remote_cls.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=0,
            scheduling_strategy=strategy,
            runtime_env=runtime_env,
            **placement.actor_options(),
        ).remote(name)
        command = list(request.command)
        if command and command[0] == sys.executable:
            command[0] = "{python}"  # the node's own interpreter
        ports = [contract.CONTROL_PORT] if request.control_port else []
        env = dict(request.env)
        if request.fixed_port is None:
            ports.insert(0, contract.PORT)
        else:  # the app binds this port whatever $PORT says: one such replica per node
            env[contract.PORT] = str(request.fixed_port)
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if request.setup:
                setup_env = {k: v for k, v in request.env.items() if k != contract.CONTROL_SECRET}
                code, tail = await asyncio.wait_for(
                    actor.setup.remote(request.setup, setup_env), START_TIMEOUT_S * 5
                )
                if code != 0:
                    raise ProvisionError(f"setup exited with code {code} on its node: {tail}")
            info = await asyncio.wait_for(
                actor.start.remote(command, env, ports, placement.describe()),
                START_TIMEOUT_S,
            )
        except BaseException:
            self._release((request.service, request.replica_id))
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
            raise
        if request.fixed_port is not None:
            info = {**info, "ports": {**info.get("ports", {}), contract.PORT: request.fixed_port}}
        replica = RayReplica(actor, name, info, request.log_path)
        replica.watch()
        if request.fixed_port is not None:
            self._fixed_replicas[(request.service, request.replica_id)] = replica
        return replica

    def _release(self, key: tuple[str, int]) -> None:
        self._fixed.pop(key, None)
        self._fixed_replicas.pop(key, None)

    def _holds_port(self, key: tuple[str, int]) -> bool:
        """Whether the replica reserved under ``key`` may still hold its node's port:
        not yet started, or started and not known to have exited."""
        replica = self._fixed_replicas.get(key)
        return replica is None or replica.exit_code() is None

    async def _fixed_port_strategy(self, request: LaunchRequest) -> Any:
        """A node for a replica on a fixed port, waiting (boundedly) while a replica
        that holds the port is being stopped: a failed replica's replacement is
        launched while its predecessor's stop is still under way. ProvisionError
        when every node has a live holder."""
        deadline = time.monotonic() + FIXED_PORT_WAIT_S
        while True:
            nodes = await asyncio.to_thread(_alive_nodes)
            strategy = self._node_for_fixed_port(request, nodes)  # reserved before awaiting
            if strategy is not None:
                return strategy
            stopping = any(
                replica.stopping and self._holds_port(key)
                for key, replica in self._fixed_replicas.items()
                if key[0] == request.service
            )
            if not stopping or time.monotonic() > deadline:
                raise ProvisionError(
                    f"service.ports: every node of the Ray cluster ({len(nodes)}) already"
                    f" runs a replica on port {request.fixed_port}; one replica per node"
                    " binds a fixed port (make the app listen on $PORT to run more)"
                )
            await asyncio.sleep(0.2)

    def _node_for_fixed_port(self, request: LaunchRequest, nodes: list[dict[str, Any]]) -> Any:
        """A node where no other replica of the service holds its fixed port (now
        reserved for this one), as a hard node-affinity strategy; None when every
        node has one."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        taken = {
            node
            for key, node in self._fixed.items()
            if key[0] == request.service and self._holds_port(key)
        }
        for node in nodes:
            if node["NodeID"] not in taken:
                self._fixed[(request.service, request.replica_id)] = node["NodeID"]
                return NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        return None

    def adopt(self, request: AdoptRequest) -> RayReplica | None:
        """A replica a previous controller started, found by its actor's name (blocks
        for at most a few seconds: re-adoption runs once, when the controller starts)."""
        import ray

        service, replica_id, port = request.service, request.replica_id, request.port

        name = actor_name(self.home_id, service, replica_id)
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
            code, info = ray.get([actor.poll.remote(), actor.info.remote()], timeout=CALL_TIMEOUT_S)
        except Exception:
            return None
        if code is not None or not info:
            return None
        fixed = contract.PORT not in info.get("ports", {})
        if fixed:  # launch() gives an actor on a fixed port no $PORT of its own
            info = {**info, "ports": {**info.get("ports", {}), contract.PORT: port}}
        log_path = self.home.replica_log(service, replica_id)
        replica = RayReplica(actor, name, info, log_path)
        if fixed and replica.node_id:
            # Its node's port is taken again for this controller: a replacement
            # goes to another node, not onto this replica's port.
            self._fixed[(service, replica_id)] = replica.node_id
            self._fixed_replicas[(service, replica_id)] = replica
        # The log here holds exactly what earlier controllers copied: continue after it.
        with contextlib.suppress(OSError):
            replica.log_offset = min(log_path.stat().st_size, int(info.get("log_size", 0)))
        replica.watch()
        return replica

    def placement_problem(self, spec: ServiceSpec) -> str | None:
        """More replicas on a fixed port than the cluster has nodes: each node holds
        one (said before anything starts, never a loop of failing launches)."""
        port = fixed_port(spec)
        if port is None:
            return None
        svc = spec.service
        most = svc.replica_policy.max_replicas if svc.replica_policy is not None else svc.replicas
        nodes = len(_alive_nodes())
        if most is None or most <= nodes:
            return None
        field = "service.ports" if svc.ports is not None else "resources.ports"
        return (
            f"{field}: run does not use $PORT, so each replica binds port {port}: the Ray"
            f" cluster's {nodes} nodes hold {nodes} such replicas, {most} asked"
            " (make the app listen on $PORT to run more; see docs/skyserve.md)"
        )

    async def _shipped(self, request: LaunchRequest) -> dict[str, Any]:
        """The runtime_env with the workdir uploaded to the cluster once per version
        (Ray takes a local directory only for a whole job, so it is packaged here
        and each actor names the package)."""
        key = str(request.workdir)
        shipped = self._uploaded.get(key)
        if shipped is None:
            from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

            with tempfile.TemporaryDirectory(prefix="steady-ray-") as scratch:
                shipped = await asyncio.to_thread(
                    upload_working_dir_if_needed,
                    {"working_dir": key},
                    False,
                    scratch,
                    log,
                )
            self._uploaded[key] = shipped
        return {**_runtime_env(request), **shipped}

    async def stop(self, handle: Any, timeout_s: float) -> None:
        import ray
        from ray.exceptions import RayActorError

        assert isinstance(handle, RayReplica)
        handle.stopping = True
        try:
            await asyncio.wait_for(handle.actor.stop.remote(timeout_s), timeout_s + CALL_TIMEOUT_S)
            if await handle.copy_rest():
                await handle.actor.discard.remote()  # the node's copy is no longer needed
        except RayActorError:
            handle.preempted = True  # the actor died with its node
        except Exception:
            log.info("replica actor %s did not answer stop; killing it", handle.name)
        handle.close()
        for key in [k for k in self._fixed if handle.name == actor_name(self.home_id, *k)]:
            self._release(key)  # its node may take another fixed-port replica
        with contextlib.suppress(Exception):
            ray.kill(handle.actor, no_restart=True)
        if handle._exit is None:
            handle._exit = -15


def _alive_nodes() -> list[dict[str, Any]]:
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [n for n in nodes if n.get("Alive")]


def _alive_node_resources() -> list[dict[str, float]]:
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [dict(n.get("Resources", {})) for n in nodes if n.get("Alive")]


def _runtime_env(request: LaunchRequest) -> dict[str, Any]:
    """What travels with the actor: the version's workdir, and its ``pip``
    requirements, which Ray installs per node into an environment of their own."""
    env: dict[str, Any] = {"working_dir": str(request.workdir)}
    if isinstance(request.pip, list) and request.pip:
        env["pip"] = list(request.pip)
    elif isinstance(request.pip, str):
        env["pip"] = str(request.workdir / request.pip)
    return env
