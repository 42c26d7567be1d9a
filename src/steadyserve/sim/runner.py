"""One run of a schedule: the simulated machine, the controller on it, the steps.

A step applies the schedule's events of that step, advances the clock by
``STEP_S``, lets every task run until it waits on the clock, ticks the reconcile
loop, lets the tasks run again, sends the clients' requests, and checks the
invariants (sim/invariants.py). A controller kill lands after a number of event
loop passes drawn by the schedule, so it can fall at any await point of any task;
the next controller starts from the same SQLite file (or, after a state fault, from
what is left of it: sim/state_faults.py), as the real entry starts one: the state
checked and recovered first (controller/recovery.py), then the real start
(controller/startup.py) with its orphan sweep over the simulated processes. After the last step the
faults stop, waiting updates are promoted, and the run goes on (bounded) until the
service converges, which the ``ends`` invariant then checks.

A run's trace (one line a step) is a function of its schedule alone: the same seed
gives the same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadyserve.controller import progressive, recovery
from steadyserve.controller.errors import BadInput, Conflict, NotFound
from steadyserve.controller.rollout import in_place
from steadyserve.controller.runtime import ServiceRuntime
from steadyserve.core.states import ReplicaStatus, ServiceStatus, UpdateMode, VersionOutcome
from steadyserve.home.paths import Home
from steadyserve.lb import mirror
from steadyserve.sim import commands, fleet, state_faults
from steadyserve.sim.answers import MirroredAsk
from steadyserve.sim.checks_canary import CanaryWatch
from steadyserve.sim.clock import FakeClock, settle
from steadyserve.sim.determinism import InlineExecutor, seeded_generators
from steadyserve.sim.invariants import StateWatch, Violation
from steadyserve.sim.machine import SimMachine
from steadyserve.sim.schedule import STEP_S, Schedule
from steadyserve.sim.traffic import Clients, Outcome, SimLoadBalancer
from steadyserve.sim.world import (
    SimBackend,
    SimConfigPost,
    SimController,
    SimLoadBalancerProcess,
    SimProber,
)
from steadyserve.spec import parse_service
from steadyserve.store import STRICT_MOVES_ENV, ServiceRow, Store, VersionRow

NAME = "svc"
DISTURBED_S = 30.0
"""After a fault or restart, failures are the fault's for this long (a replacement
starts, passes its probe and is routed well within it)."""


def _tmp_root() -> Path:
    """tmpfs when there is one: SQLite's fsyncs cost nothing, a truncation is real."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


@dataclass
class Result:
    schedule: Schedule
    steps: int = 0
    violations: list[Violation] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    ended: dict[str, int] = field(default_factory=dict)
    """Updates that ended, by mode and status (``rolling SUCCEEDED``)."""
    restarts: int = 0
    requests: int = 0
    failed: int = 0
    canary: dict[str, int] = field(default_factory=dict)
    """What canary verdicts said and did (``analysis failed``, ``shadow passed``...)."""

    def trace_bytes(self) -> bytes:
        return ("\n".join(self.trace) + "\n").encode()


class Run:
    """The simulated machine and controller of one schedule."""

    def __init__(self, schedule: Schedule, root: Path) -> None:
        self.schedule = schedule
        self.name = NAME
        self.result = Result(schedule)
        self.clock = FakeClock()
        self.home = Home(root / "home").ensure()
        self.backend = SimBackend(self.home, self.clock)
        self.machine = SimMachine(self.backend)
        self.prober = SimProber(self.backend, self.clock)
        self.config_post = SimConfigPost(self.backend)
        self.lb_processes: dict[str, SimLoadBalancerProcess] = {}
        self.sim_tasks: set[asyncio.Task[Any]] = set()
        self.backend.status_of = self._status_of
        self.backend.faulted = lambda request: request.service == NAME
        self.lb = SimLoadBalancer(self.clock, self._sim_task)
        self.lbs: dict[str, SimLoadBalancer] = {NAME: self.lb}
        """Every service's load balancer (the clients send through the run's service's)."""
        self.web_run = "serve --web0"
        """The command of the second service a fleet file lists (sim/fleet.py)."""
        self.clients = Clients(self.lb, self.backend)
        self.life = 0
        self.controller: SimController | None = None
        self.runtime: ServiceRuntime | None = None
        self.commands = 0
        self.command_tasks: set[asyncio.Task[None]] = set()
        self.step = 0
        self.disturbed_until = 0.0
        self.zero_until = 0.0
        self.ready_once = False
        self.killed_tasks: set[asyncio.Task[Any]] = set()
        self.live_tasks: dict[asyncio.Task[Any], int] = {}
        self._task_numbers = itertools.count()
        self.kill_at: dict[str, Any] | None = None
        self.down_until_step = -1
        self.update_started: dict[tuple[int, int], tuple[int, int]] = {}
        self.canaries = CanaryWatch()
        self.loss: state_faults.Loss | None = None
        """The state fault of the controller now down, judged at its restart."""
        self.short: dict[int, int] = {}
        """A restored state lost replicas: fewer may be routed until these are READY
        again (by version: state_faults.shortfall)."""
        self.restores = 0
        self.stray_lines: list[str] = []
        """The controller's log lines reporting strays (state_faults.StrayLines)."""
        self.event_marks: list[tuple[float, int]] = []
        """(time, newest event id) after each step: what a restore may not lose."""
        self._make_service()
        self.watch = StateWatch(str(self.home.db_path))

    # the machine -------------------------------------------------------------
    def _sim_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self.sim_tasks.add(task)
        task.add_done_callback(self.sim_tasks.discard)
        return task

    def _make_service(self) -> None:
        """``steady up`` of version 1, as the controller records it."""
        spec = parse_service(
            {"name": NAME, "run": self.schedule.run, "service": self.schedule.service},
            base_dir=self.home.root,
        )
        store = Store(self.home.db_path)
        row = ServiceRow(
            name=NAME,
            status=ServiceStatus.CONTROLLER_INIT,
            version=1,
            created_at=self.clock.wall(),
            port=30001,
        )
        store.add_service(
            row,
            VersionRow(
                service=NAME,
                version=1,
                created_at=self.clock.wall(),
                spec_json=spec.spec_json(),
                spec_yaml="",
                mode=UpdateMode.INITIAL,
                outcome=VersionOutcome.ACTIVE,
            ),
        )
        store.close()
        self.home.version_workdir(NAME, 1).mkdir(parents=True)  # as `steady up` leaves it

    async def start_controller(self) -> None:
        """A controller starts as controller/entry.py starts one: its state checked
        (recovered when lost) before it is opened, then the real start."""
        self.life += 1
        try:
            notes = recovery.prepare(self.home, self.clock.wall(), self.machine)
        except recovery.StateRefused as exc:
            self._violate("recovery", f"the controller refused to start: {exc}")
            return
        if self.loss is not None:
            state_faults.judge(self, self.loss, notes)
            self.loss = None
        self.controller = SimController(
            self.home,
            self.clock,
            self.backend,
            self.prober,
            self.lb_processes,
            self.life,
            self.machine,
        )
        swept = len(self.machine.swept)
        await self.controller.start()
        if len(self.machine.swept) > swept:
            self.result.trace.append(f"  swept orphan pid(s) {self.machine.swept[swept:]}")
        self.runtime = self.controller.services[NAME]
        fleet.follow(self)

    def kill_controller(self) -> None:
        """SIGKILL: every task of the controller ends where it is; its state file stays."""
        assert self.controller is not None
        self.result.restarts += 1
        current = asyncio.current_task()
        # In the order they were made: a set of tasks iterates by memory address.
        for task in sorted(self.live_tasks, key=self.live_tasks.__getitem__):
            if task is not current and task not in self.sim_tasks and not task.done():
                self.killed_tasks.add(task)
                task.cancel()
        for lb in self.lbs.values():
            lb.detach()
        self.controller.store.close()  # what a task would write on its way out is lost
        self.controller = None
        self.runtime = None
        self.disturb()

    def _status_of(self, pid: int) -> ReplicaStatus | None:
        rt = self.runtime
        rows = [] if rt is None else [r for r in rt.replicas.values() if r.pid == pid]
        return rows[0].status if rows else None

    def disturb(self) -> None:
        self.disturbed_until = self.clock.now() + DISTURBED_S

    def task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        """Every task of the run, numbered as made; one that raises is judged when it
        ends (not when the garbage collector happens to find it unretrieved)."""
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        self.live_tasks[task] = next(self._task_numbers)
        task.add_done_callback(self._task_ended)
        return task

    def _task_ended(self, task: asyncio.Task[Any]) -> None:
        self.live_tasks.pop(task, None)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved: asyncio reports nothing later
        if exc is not None and task not in self.killed_tasks:
            self._violate("agreement", f"a controller task raised: {exc!r}")

    def _violate(self, invariant: str, what: str) -> None:
        self.result.violations.append(Violation(invariant, self.step, what))

    # events ----------------------------------------------------------------
    def apply(self, kind: str, args: dict[str, Any]) -> None:
        if kind == "load":
            self.clients.per_step = int(args["per_step"])
        elif kind == "update":
            self._command(self._update(args))
        elif kind == "command":
            self._progressive(str(args["action"]), bool(args.get("full")))
        elif kind == "crash":
            pid = self._pick(int(args["pick"]))
            if pid is not None:
                self.backend.processes[pid].crashed = True
                self.backend.replicas[pid].exit(137)
                self.disturb()
        elif kind in ("hang", "probe_fail"):
            pid = self._pick(int(args["pick"]))
            if pid is not None:
                proc = self.backend.processes[pid]
                until = self.clock.now() + float(args["for_s"])
                if kind == "hang":
                    proc.hung_until = until
                else:
                    proc.probe_fail_until = until
                self.disturbed_until = max(self.disturbed_until, until + DISTURBED_S)
        elif kind in ("slow_start", "never_start"):
            self.backend.next_faults.append({"kind": kind, **args})
        elif kind in ("controller_kill", "state_loss"):
            if self.controller is not None:
                self.kill_at = {**args, "kind": kind}
        elif kind == "spawn_kill":
            self.backend.on_spawn = lambda: self._kill_in_spawn(int(args["down_steps"]))
        elif kind == "lb_restart":
            self.lb.restart()
            self.disturb()

    def _kill_in_spawn(self, down_steps: int) -> None:
        """SIGKILL between a replica's process starting and its pid being recorded."""
        if self.controller is None:
            return
        task = asyncio.current_task()
        assert task is not None
        self.killed_tasks.add(task)
        self.result.trace.append("  controller killed as a replica's process started")
        self.down_until_step = self.step + down_steps
        self.kill_controller()

    def _pick(self, n: int) -> int | None:
        """A live replica of the run's service: a fault of a replica hits the service the
        clients use (a second one, sim/fleet.py, meets only the controller's faults)."""
        alive = sorted(
            pid
            for pid, replica in self.backend.replicas.items()
            if self.backend.alive(pid) and replica.request.service == NAME
        )
        return alive[n % len(alive)] if alive else None

    def _command(self, coro: Coroutine[Any, Any, Any]) -> None:
        """A CLI command reaching the controller: a task of the controller's."""
        self.commands += 1
        number = self.commands

        async def carried() -> None:
            try:
                result = await coro
                self.result.trace.append(f"  cmd{number} ok {json.dumps(result.get('version'))}")
            except (BadInput, Conflict, NotFound) as exc:
                why = str(exc).splitlines()[0].replace(str(self.home.root), "$STEADY_HOME")
                self.result.trace.append(f"  cmd{number} refused: {why}")

        if self.controller is None:  # nothing listens: the CLI's call fails
            coro.close()
            self.result.trace.append(f"  cmd{number} refused: no controller")
            return
        task = asyncio.get_running_loop().create_task(carried())
        task.add_done_callback(lambda _: coro.close())  # killed before it began: not awaited
        self.command_tasks.add(task)

    async def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        return await commands.update(self, args)

    def _progressive(self, action: str, full: bool) -> None:
        self.commands += 1
        if self.runtime is None:
            self.result.trace.append(f"  cmd{self.commands} refused: no controller")
            return
        try:
            message = self.carry_out(action, full)
            self.result.trace.append(f"  cmd{self.commands} {action}: {message}")
        except BadInput as exc:
            self.result.trace.append(f"  cmd{self.commands} {action} refused: {exc}")

    def carry_out(self, action: str, full: bool) -> str:
        """``steady <action>``; a promote of a canary is noted (it walks past a shadow
        verdict by the user's word: sim/checks_canary.py exempts that canary)."""
        assert self.runtime is not None
        update = self.runtime.rollout.update
        message = progressive.carry_out(self.runtime, action, full)
        if action == "promote" and update is not None and update.id is not None:
            self.canaries.promoted.add(update.id)
        return message

    # stepping --------------------------------------------------------------
    async def one_step(self) -> Outcome:
        self.clock.advance(STEP_S)
        if self.kill_at is not None:
            passes = int(self.kill_at["at"])
            for _ in range(passes):
                await asyncio.sleep(0)
            self.down_until_step = self.step + int(self.kill_at["down_steps"])
            fault, self.kill_at = self.kill_at, None
            disturbed = self.disturbed_until
            self.kill_controller()
            if fault["kind"] == "state_loss":
                # Judged by what the docs promise of a recovery, not a restart's allowance.
                self.disturbed_until = disturbed
                self.loss = state_faults.lose_state(self, str(fault["cut"]))
        await settle()
        if self.controller is None and self.step >= self.down_until_step:
            await self.start_controller()
            await settle()
        if self.controller is not None:
            fleet.follow(self)
            for runtime in list(self.controller.services.values()):
                runtime.tick()
            await settle()
        out = self.clients.step(self.step)
        self.result.requests += out.ok + out.failed
        self.result.failed += out.failed
        return out

    def trace_line(self, out: Outcome) -> str:
        rt = self.runtime
        if rt is None:
            return f"{self.step} down ok={out.ok} fail={out.failed}"
        reps = _replicas(rt)
        update = rt.rollout.update
        upd = f"{update.mode}>{update.to_version}:{update.status.value[:4]}" if update else "-"
        others = (
            "".join(
                f" {name}:v{other.row.version}[{_replicas(other)}]"
                for name, other in self.controller.services.items()
                if name != NAME
            )
            if self.controller is not None
            else ""
        )
        return (
            f"{self.step} v{rt.row.version} {rt.row.status.value[:5]} {upd} [{reps}] "
            f"t{rt.routes.version} ok={out.ok} fail={out.failed}{others}"
        )


def _replicas(rt: ServiceRuntime) -> str:
    return ",".join(
        f"{r.id}:{r.version}:{r.status.value[:4]}"
        for r in sorted(rt.replicas.values(), key=lambda r: r.id)
    )


@contextlib.contextmanager
def _quiet_logs(strays: state_faults.StrayLines) -> Iterator[None]:
    """The controller logs what it survives (a failed tick, an illegal move): the
    invariants judge those, the log would only flood the terminal. Only the strays it
    reports are read (``strays``), as a user reads them in its log."""
    logger = logging.getLogger("steadyserve")
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    logger.addHandler(strays)
    try:
        yield
    finally:
        logger.removeHandler(strays)
        logger.setLevel(level)
        logger.propagate = propagate


def run(schedule: Schedule) -> Result:
    """Run ``schedule`` on a fresh event loop and simulated machine; its result."""
    root = Path(tempfile.mkdtemp(prefix="steady-sim-", dir=_tmp_root()))
    saved_post = in_place.__dict__["post_user_config"]
    saved_ask = mirror.__dict__["_ask"]
    # As a running controller: an illegal move is recorded (the ``moves`` invariant
    # reads it), not raised (the tests' strict setting would end the run).
    saved_strict = os.environ.pop(STRICT_MOVES_ENV, None)
    try:
        strays = state_faults.StrayLines()
        with _quiet_logs(strays), seeded_generators(schedule.seed):
            run_ = Run(schedule, root)
            run_.stray_lines = strays.lines
            setattr(in_place, "post_user_config", run_.config_post)  # noqa: B010 (no socket)
            setattr(mirror, "_ask", MirroredAsk(run_.backend, run_.clock))  # noqa: B010
            try:
                asyncio.run(_main(run_))
            finally:
                run_.watch.close()
            return run_.result
    finally:
        setattr(in_place, "post_user_config", saved_post)  # noqa: B010
        setattr(mirror, "_ask", saved_ask)  # noqa: B010
        if saved_strict is not None:
            os.environ[STRICT_MOVES_ENV] = saved_strict
        shutil.rmtree(root, ignore_errors=True)


async def _main(run_: Run) -> None:
    from steadyserve.sim import checks  # the per-step checks read the run's state

    loop = asyncio.get_running_loop()
    loop.set_default_executor(InlineExecutor())
    loop.set_task_factory(run_.task_factory)  # type: ignore[arg-type]
    await run_.start_controller()
    await settle()
    events = sorted(run_.schedule.events, key=lambda e: e[0])
    last = max([run_.schedule.steps, *(s + 1 for s, _, _ in events)])
    i = 0
    for step in range(last):
        run_.step = step
        while i < len(events) and events[i][0] <= step:
            _, kind, args = events[i]
            run_.result.trace.append(f"  event {kind} {json.dumps(args, sort_keys=True)}")
            run_.apply(kind, args)
            i += 1
        out = await run_.one_step()
        run_.result.trace.append(run_.trace_line(out))
        checks.after_step(run_, out)
        if run_.result.violations:
            break
    if not run_.result.violations:
        await checks.end(run_, last)
    run_.result.steps = run_.step + 1
    # Leave nothing running: the next run gets a fresh loop.
    if run_.controller is not None:
        run_.controller.store.close()
