"""The controller's side of the gateway: its port, its process, its route map.

One gateway per controller (per STEADY_HOME): the last ``steady deploy`` or
``serve.start``/``serve.run`` that named a gateway port (a Ray Serve config's
``http_options.port``, or a fleet file's ``gateway: {port: N}``) sets it, one
that names none keeps the port the gateway has (Ray's default, 8000, when it has
none), and a fleet file without one removes it. The port is held from then until
``serve.shutdown()``/``steady down --all`` (:meth:`GatewaySupervisor.release`,
while no routed service is left) or ``steady controller stop``
(:meth:`GatewaySupervisor.stop_with_controller`): taking down the last
application keeps it, as Ray's ``serve.delete`` keeps its proxy. The port, Ray's
``request_timeout_s`` and the process are kept in ``STEADY_HOME/gateway.json``, so
a controller that restarts without being stopped (killed, or its service
manager's restart) adopts the running gateway instead of starting another.

The route map (prefix -> service) is every service whose current spec has a
``service.route_prefix``, and the model map (OpenAI model name -> service) every
one with ``service.served_model_names``, published together (with the prefix ->
application map Ray's ``/-/routes`` shows and the gateway's ``request_timeout_s``)
by long-poll like a service's route table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psutil

from steadyserve import port_range
from steadyserve.backends.processes import LocalProcess, same_process_alive, stop_group
from steadyserve.controller.clock import SYSTEM_CLOCK
from steadyserve.controller.endpoint import gateway_port_in
from steadyserve.controller.errors import PREFIX_TAKEN
from steadyserve.controller.routes import RoutePublisher
from steadyserve.home.paths import Home
from steadyserve.spec import ServiceSpec
from steadyserve.wire.counts import GATEWAY

log = logging.getLogger("steadyserve.controller")

SUPERVISE_S = 0.25
RESTART_BACKOFF_S = 0.5
STOP_TIMEOUT_S = 10.0


def route_map(specs: Iterable[ServiceSpec]) -> dict[str, str]:
    """Route prefix -> service name, for every service that has a prefix."""
    routes: dict[str, str] = {}
    for spec in specs:
        prefix = spec.service.route_prefix
        if prefix is not None and spec.name is not None and prefix not in routes:
            routes[prefix] = spec.name
    return dict(sorted(routes.items()))


def app_map(specs: Iterable[ServiceSpec]) -> dict[str, str]:
    """Route prefix -> application (the service's name when it is not one's), as
    Ray's ``/-/routes`` answers."""
    by_name = {spec.name: spec for spec in specs}
    return {
        prefix: str(by_name[name].application or name)
        for prefix, name in route_map(by_name.values()).items()
    }


def prefix_conflict(
    wanted: Mapping[str, str | None], others: Mapping[str, str | None]
) -> str | None:
    """Why the services ``wanted`` (name -> route_prefix) cannot be routed next to
    ``others``, which keep theirs: the gateway routes a prefix to one service, and
    Ray Serve refuses a second application on a prefix rather than hide one."""
    taken = {prefix: name for name, prefix in sorted(others.items()) if prefix is not None}
    for name, prefix in sorted(wanted.items()):
        if prefix is None:
            continue
        holder = taken.setdefault(prefix, name)
        if holder != name:
            return (
                f"{PREFIX_TAKEN}{prefix!r} of service {name} is already served by service"
                f" {holder}: give one of them another route_prefix (or take {holder} down)"
            )
    return None


def _listen6(port: int) -> socket.socket | None:
    """The gateway on ``[::1]:port`` too (``localhost`` may resolve there first, as
    in Ray's examples); None on a host without IPv6 loopback, where 127.0.0.1 serves."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::1", port))
        sock.listen(4096)
    except OSError as exc:
        sock.close()
        log.warning("gateway: not listening on [::1]:%d (%s); 127.0.0.1 only", port, exc)
        return None
    return sock


def model_map(specs: Iterable[ServiceSpec]) -> dict[str, str]:
    """OpenAI model name -> service name (``service.served_model_names``); a name
    two services claim goes to the first by service name, so the map is stable."""
    models: dict[str, str] = {}
    for spec in sorted(specs, key=lambda s: s.name or ""):
        for model in spec.service.served_model_names:
            if spec.name is not None and model not in models:
                models[model] = spec.name
    return dict(sorted(models.items()))


def port_holder(port: int) -> str:
    """`` by pid N (its command)`` for the process listening on TCP ``port``, so a
    refusal says whom to stop; a process of another user may stay unnamed."""
    try:
        found = [
            c.pid
            for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
        ]
    except (psutil.Error, OSError):
        found = []
    for pid in found:
        with contextlib.suppress(psutil.Error):
            return f" by pid {pid} ({' '.join(psutil.Process(pid).cmdline())[:200]})"
    return " by a process this user cannot see"


class GatewaySupervisor:
    def __init__(
        self,
        home: Home,
        epoch: str,
        specs: Callable[[], Iterable[ServiceSpec]],
        tables: Callable[[str], RoutePublisher | None] = lambda _name: None,
    ) -> None:
        """``tables`` gives a service's own route publisher, whose gateway view tells
        whether the gateway's lane for it has its current replica table yet."""
        self.home = home
        self.routes = RoutePublisher(epoch)
        self._specs = specs
        self._tables = tables
        self.port: int | None = None
        self.request_timeout_s: float | None = None  # Ray's http_options.request_timeout_s
        self.handle: LocalProcess | None = None
        self.listener: socket.socket | None = None
        self.listener6: socket.socket | None = None  # ::1, when this host has IPv6
        self._last_start = 0.0
        self.problem: str | None = None
        self._configuring = asyncio.Lock()  # one port change (and its stop) at a time
        self._load()

    @property
    def path(self) -> Any:
        return self.home.root / "gateway.json"

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        port = data.get("port")
        self.port = port if isinstance(port, int) else None
        timeout = data.get("request_timeout_s")
        self.request_timeout_s = float(timeout) if isinstance(timeout, (int, float)) else None
        pid, created = data.get("pid"), data.get("create_time")
        if isinstance(pid, int) and self.port and same_process_alive(pid, created):
            self.handle = LocalProcess(pid, created, self.port)

    def _save(self) -> None:
        data = {
            "port": self.port,
            "request_timeout_s": self.request_timeout_s,
            "pid": self.handle.pid if self.handle else None,
            "create_time": self.handle.create_time if self.handle else None,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)

    @property
    def pids(self) -> set[int]:
        pid = self.handle.pid if self.handle is not None else None
        return {pid} if pid is not None else set()

    @property
    def running(self) -> bool:
        return self.handle is not None and self.handle.exit_code() is None

    def default_port(self, port: int | None, taken: set[int]) -> int | None:
        """A port the file or driver did not name (``port``: Ray's 8000): the port of
        the gateway there is (Ray keeps a running instance's http_options), else
        ``port``, unless ``STEADY_PORTS`` confines ports to a range (port_range.py);
        ``taken``: the services' endpoint ports."""
        if port is None:
            return None
        found = port_range.from_env()
        if found is not None:
            return gateway_port_in(found, self.port, taken)
        return port if self.port is None else self.port

    def check_port(self, port: int | None) -> str | None:
        """Why ``port`` cannot be the gateway's, or None (it is, or it is free)."""
        if port is None or port == self.port:
            return None
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(("127.0.0.1", port))
        except OSError:
            return f"gateway port {port} is already in use{port_holder(port)}"
        return None

    async def configure(self, port: int | None, request_timeout_s: float | None = None) -> None:
        """Serve the gateway on ``port`` (None: no gateway); restarts it on a new port.
        ``request_timeout_s`` (Ray's ``http_options``) is kept when None, cleared when
        not above 0 (Ray's "no timeout"), and reaches the gateway by its map."""
        async with self._configuring:
            if request_timeout_s is not None:
                self.request_timeout_s = request_timeout_s if request_timeout_s > 0 else None
            if port != self.port:
                await self._restart_on(port)
            else:
                self._save()
                self.publish()
            self.supervise()  # the port is bound now: a request sent next waits for it

    async def release(self) -> bool:
        """Stop the gateway and free its port unless a service is still routed on it
        (``serve.shutdown()``, ``steady down --all``); True if it was stopped.

        Under the same lock as :meth:`configure`: a deploy that came meanwhile and
        routes a service keeps its gateway."""
        async with self._configuring:
            if self.port is None and self.handle is None:
                return False
            if route_map(self._specs()) or model_map(self._specs()):
                return False
            self.request_timeout_s = None
            await self._restart_on(None)
            return True

    async def leave(self, stop: bool) -> None:
        """The controller exits: asked to (``steady controller stop``), the gateway
        stops with it; else (a signal: a restart by its service manager) the
        gateway keeps serving for the next controller to adopt."""
        if stop:
            await self.stop_with_controller()
        else:
            self.detach()

    async def stop_with_controller(self) -> None:
        """``steady controller stop``: the gateway process stops and its port is
        free; the port is kept for the next controller only while a service is
        routed on it (the applications keep running and come back on it)."""
        async with self._configuring:
            if not (route_map(self._specs()) or model_map(self._specs())):
                self.port = None
                self.request_timeout_s = None
            keep, self.port = self.port, None  # supervision must not start it again
            await self.stop()
            self.port = keep
            self._save()

    async def _restart_on(self, port: int | None) -> None:
        self.port = None  # supervision must not start it again while it stops
        await self.stop()
        self.port = port
        self._save()
        self.publish()

    def publish(self) -> None:
        specs = list(self._specs())
        self.routes.publish(
            {
                "routes": route_map(specs),
                "models": model_map(specs),
                "apps": app_map(specs),
                "request_timeout_s": self.request_timeout_s,
            }
        )

    async def run(self) -> None:
        """Keep the map current and the process running (the controller's task)."""
        while True:
            try:
                self.publish()
                self.supervise()
            except Exception:  # keep supervising whatever one round hit
                log.exception("gateway supervision")
            await asyncio.sleep(SUPERVISE_S)

    def supervise(self) -> None:
        if self.port is None or self.running:
            return
        if SYSTEM_CLOCK.now() - self._last_start < RESTART_BACKOFF_S:
            return
        self._last_start = SYSTEM_CLOCK.now()
        try:
            listener = self._listen(self.port)
        except OSError as exc:
            self.problem = f"cannot listen on gateway port {self.port}: {exc.strerror}"
            log.warning("%s; retrying", self.problem)
            return
        self.problem = None
        log_path = self.home.root / "logs" / "gateway.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, STEADY_HOME=str(self.home.root))
        fds = [listener.fileno()]
        if self.listener6 is not None:
            fds.append(self.listener6.fileno())
        with open(log_path, "ab") as out:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "steadyserve.lb.gateway_server",
                    "--home",
                    str(self.home.root),
                    "--port",
                    str(self.port),
                    *[arg for fd in fds for arg in ("--listen-fd", str(fd))],
                ],
                pass_fds=tuple(fds),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.handle = LocalProcess.of(popen, self.port)
        self._save()

    def _listen(self, port: int) -> socket.socket:
        if self.listener is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen(4096)
            except OSError:
                sock.close()
                raise
            self.listener = sock
            self.listener6 = _listen6(port)
        return self.listener

    def detach(self) -> None:
        """The controller stops; the gateway keeps serving."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.listener6 is not None:
            self.listener6.close()
            self.listener6 = None

    async def stop(self) -> None:
        if self.handle is not None:
            with contextlib.suppress(Exception):
                await stop_group(self.handle, STOP_TIMEOUT_S)
        self.handle = None
        # A gateway of this home this controller does not know (started by one that
        # was killed before it recorded it in gateway.json) goes too.
        for proc in self._strays():
            with contextlib.suppress(Exception):
                await stop_group(LocalProcess(proc.pid, proc.create_time(), 0), STOP_TIMEOUT_S)
        self.detach()
        self._save()

    def _strays(self) -> list[psutil.Process]:
        home = str(self.home.root)
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if "steadyserve.lb.gateway_server" in cmdline and home in cmdline:
                found.append(proc)
        return found

    def lanes_behind(self, services: Iterable[str]) -> list[str]:
        """The services among ``services`` whose current replica table the gateway's
        lane has not acknowledged (a lane just added has no replicas to send to)."""
        behind = set()
        for name in services:
            table = self._tables(name)
            if table is None or table.version == 0:
                continue
            view = table.workers.get(f"consumer:{GATEWAY}")
            if view is None or view.acked_version < table.version:
                behind.add(name)
        return sorted(behind)

    def status(self) -> dict[str, Any]:
        # Published first: a deploy or delete that just changed the specs must show
        # in routes_version now, not at the next supervision round.
        self.publish()
        specs = list(self._specs())
        routes = route_map(specs)
        return {
            "port": self.port,
            "request_timeout_s": self.request_timeout_s,
            "running": self.running,
            "routes": routes,
            "problem": self.problem,
            # The map's version and the newest one the gateway has polled with since
            # (so holds), and the routed services whose replica table its lanes do
            # not hold yet: serve.run waits until the versions meet and none lags.
            "routes_version": self.routes.version,
            "applied_version": max(
                (w.acked_version for w in self.routes.workers.values()), default=0
            ),
            "lanes_behind": self.lanes_behind(
                set(routes.values()) | set(model_map(specs).values())
            ),
        }
