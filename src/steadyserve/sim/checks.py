"""The invariants of sim/invariants.py, checked against a run after each step and at
its end. A violation is recorded on the run's result (the run stops at the first)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from steadyserve.controller.errors import BadInput
from steadyserve.core.states import ReplicaStatus, ServiceStatus, UpdateMode
from steadyserve.sim import checks_canary, state_faults
from steadyserve.sim.schedule import STEP_S
from steadyserve.sim.traffic import ANSWERED_500, Outcome

if TYPE_CHECKING:
    from steadyserve.controller.runtime import ServiceRuntime
    from steadyserve.sim.runner import Run

END_BOUND_S = 240.0
"""Once faults stop, every update ends and the service converges within this."""

_ROUTABLE = (ReplicaStatus.READY, ReplicaStatus.SHUTTING_DOWN)
_SETTLED = (ReplicaStatus.READY,)


def after_step(run: Run, out: Outcome) -> None:
    rt = run.runtime
    if rt is not None and rt.row.status is ServiceStatus.READY and run.lb.balancer.replicas:
        run.ready_once = True
    # Closed while a lost state file waits for its recovery. Nothing is awaited from
    # here on: what the look saw is the file for every check of this step.
    changed = run.watch.open and run.watch.look()
    _routing(run, out)
    _stopped_busy(run)
    _failures(run, out)
    if rt is not None:
        _capacity(run)
        _agreement(run)
    if run.watch.open:
        if changed:  # no commit, no new event, update or outcome to judge
            for bad in run.watch.moves():
                run._violate("moves", bad)
        run.event_marks.append((run.clock.now(), run.watch.last_event))
    checks_canary.after_step(run, out)


def _routing(run: Run, out: Outcome) -> None:
    rt = run.runtime
    assert out.routed is not None
    for rid, pid in out.routed:
        if pid in run.backend.drained:
            run._violate(
                "drain", f"request routed to replica {rid} after the controller stopped it"
            )
            continue
        if rt is None or run.lb.known != rt.routes.token:
            # No controller, or its newest table is on its way: the load balancer
            # routes by the last table it has, as a real one does meanwhile.
            continue
        row = rt.replicas.get(rid)
        if row is None:
            run._violate(
                "routing", f"request routed to replica {rid}, which the state does not list"
            )
        elif row.status not in _ROUTABLE:
            run._violate("routing", f"request routed to replica {rid}, which is {row.status}")
        else:
            update, canary = rt.rollout.update, rt.canary.state
            if (
                rt.updating
                and update is not None
                and update.mode is UpdateMode.CANARY
                and canary is not None
                and canary.weight == 0
                and row.version == update.to_version
            ):
                run._violate("routing", f"request routed to canary replica {rid} at weight 0")


def _stopped_busy(run: Run) -> None:
    """A replica the controller stopped while requests were in flight on it (and not
    for a fault of its own) cut them: its drain was not waited for."""
    for request in run.clients.open:
        pid = request.pid
        if pid in run.backend.drained and not run.backend.faulty(pid):
            run._violate("drain", f"replica {request.replica.id} stopped with requests in flight")
            return


def _failures(run: Run, out: Outcome) -> None:
    assert out.failures is not None
    rt, now = run.runtime, run.clock.now()
    # While no controller runs the load balancer keeps its last table: as empty as
    # when the controller went down.
    none_ready = rt is None or not any(
        r.status is ReplicaStatus.READY for r in rt.replicas.values()
    )
    if _may_go_to_zero(run) or (run.zero_until >= now and none_ready):
        # Until a replica is ready again (whatever update follows), and its table
        # reached the load balancer.
        run.zero_until = now + 1.0
    if run.short:
        # A restored state lost replicas: fewer are routed until the replacements are
        # READY (docs/behaviour.md, "The home's faults"), and their table arrived.
        if rt is not None and state_faults.whole(rt, run.short):
            run.short = {}
        run.zero_until = now + 1.0
    if not run.ready_once or run.clock.now() < max(run.disturbed_until, run.zero_until):
        return
    for why, pid in out.failures:
        if why in ("load balancer restarted", ANSWERED_500) or (
            pid is not None and run.backend.faulty(pid)
        ):
            continue
        run._violate("availability", f"a request failed ({why}) with no fault to explain it")
        return


def _may_go_to_zero(run: Run) -> bool:
    """A rolling update whose ``max_unavailable`` is the whole target: the user allowed
    every replica to drain at once, so a request may find none while it runs, and
    after it ended (aborted, say) until a replica is ready again. The same holds of
    the replicas an update of any mode left of another version once it ended (aborted
    or failed): they converge by the rolling rule and its settings (rollout/state.py,
    ``_converging_plan``)."""
    rt = run.runtime
    update = None if rt is None else rt.rollout.update
    if rt is None or update is None:
        return False
    ready = any(r.status is ReplicaStatus.READY for r in rt.replicas.values())
    if update.mode is not UpdateMode.ROLLING:
        left = any(
            r.version != rt.row.version
            and (r.status.is_live or r.status is ReplicaStatus.SHUTTING_DOWN)
            for r in rt.replicas.values()
        )
        if rt.updating or not left:
            return False
    if not rt.updating and ready:
        return False
    target = rt.target_replicas()
    return target - rt.spec.service.max_unavailable_count(target) <= 0


def _capacity(run: Run) -> None:
    """Ready capacity within ``target - max_unavailable`` and live replicas within
    ``target + max_surge`` while a restart update is in flight with nothing disturbing."""
    rt = run.runtime
    assert rt is not None
    update = rt.rollout.update
    if not rt.updating or update is None or update.id is None:
        return
    target = rt.target_replicas()
    serving = _published_serving(run)
    # An in-place change joining the update (a new target version) starts a new baseline.
    seen = run.update_started.setdefault((update.id, update.to_version), (target, serving))
    quiet = run.clock.now() >= run.disturbed_until and run.ready_once
    if rt.rollout.holds.held():  # `steady pause`: nothing launched or drained, by request
        return
    if (
        seen[0] != target
        or not quiet
        or update.mode not in (UpdateMode.ROLLING, UpdateMode.BLUE_GREEN)
    ):
        return
    svc = rt.spec.service
    if update.mode is UpdateMode.ROLLING:
        live = sum(1 for r in rt.replicas.values() if r.status.is_live)
        if live > target + svc.max_surge_count(target):
            run._violate(
                "surge",
                f"{live} live replicas, over target {target} + max_surge "
                f"{svc.max_surge_count(target)}",
            )
    floor = target - (svc.max_unavailable_count(target) if update.mode is UpdateMode.ROLLING else 0)
    floor = min(floor, seen[1])  # what was ready when it began
    if serving < floor:
        run._violate(
            "availability",
            f"{serving} ready replica(s) routed during a {update.mode} "
            f"update, below {floor} (target {target})",
        )


def _published_serving(run: Run) -> int:
    """Replicas in the controller's newest table that answer (the load balancer has
    it a moment later: the controller's decision is what is judged)."""
    rt = run.runtime
    assert rt is not None
    listed = {item["id"] for item in rt.routes.table.get("replicas", [])}
    return sum(
        1
        for r in rt.replicas.values()
        if r.id in listed and r.pid is not None and run.backend.serving(r.pid)
    )


def _agreement(run: Run) -> None:
    """Every service's runtime against the state file: replicas, version, latest update."""
    assert run.controller is not None
    for name, rt in run.controller.services.items():
        _agrees(run, name, rt)


def _agrees(run: Run, name: str, rt: ServiceRuntime) -> None:
    which = "" if rt is run.runtime else f"{name}: "
    stored, version, latest = run.watch.stored(name)
    held = {r.id: (r.version, r.status.value, r.pid) for r in rt.replicas.values()}
    if stored != held:
        diff = sorted(set(stored.items()) ^ set(held.items()))
        run._violate("agreement", f"{which}replicas in the store and the runtime differ: {diff}")
    if version != rt.row.version:
        run._violate(
            "agreement",
            f"{which}service version {version} in the store, {rt.row.version} in the runtime",
        )
    update = rt.rollout.update
    mine = None if update is None else (update.id, update.status.value, update.to_version)
    if latest != mine:
        run._violate(
            "agreement", f"{which}latest update {latest} in the store, {mine} in the runtime"
        )


def converged(run: Run) -> str | None:
    """None once every service is one version at full strength, nothing in flight;
    else why not."""
    if run.controller is None:
        return "no controller"
    pending = [(s, v) for (s, v, _), o in run.watch.outcomes.items() if o == "in progress"]
    if pending:
        return f"version(s) {pending} still 'in progress'"
    for name, rt in run.controller.services.items():
        why = _settled(rt)
        if why is not None:
            return why if rt is run.runtime else f"{name}: {why}"
    return None


def _settled(rt: ServiceRuntime) -> str | None:
    if rt.updating:
        return "an update is still in progress"
    live = [
        r
        for r in rt.replicas.values()
        if r.status.is_live or r.status is ReplicaStatus.SHUTTING_DOWN
    ]
    versions = {r.version for r in live}
    if versions - {rt.row.version}:
        return f"replicas of versions {sorted(versions)} run, the target is {rt.row.version}"
    target = rt.target_replicas()
    ready = sum(1 for r in live if r.status in _SETTLED)
    if ready != target or len(live) != target:
        return f"{ready} ready of {len(live)} live replicas, the target is {target}"
    return None


async def end(run: Run, first: int) -> None:
    """Faults stop; waiting updates are promoted; the service must converge in bound."""
    for proc in run.backend.processes.values():
        proc.hung_until = proc.probe_fail_until = 0.0
    run.backend.next_faults.clear()
    run.config_post.refused = None
    run.disturbed_until = run.clock.now() + 30.0
    every = round(5.0 / STEP_S)
    why: str | None = "not looked at"
    for n in range(round(END_BOUND_S / STEP_S)):
        run.step = first + n
        if run.runtime is not None and run.runtime.updating and n % every == 0:
            for action in ("resume", "promote"):
                with contextlib.suppress(BadInput):  # not paused, or not a canary
                    run.carry_out(action, full=True)
        out = await run.one_step()
        run.result.trace.append(run.trace_line(out))
        after_step(run, out)
        if run.result.violations:
            return
        why = converged(run)
        if why is None and all(t.done() for t in run.command_tasks):
            break
    if why is not None:
        run._violate("ends", f"not converged {END_BOUND_S:g} s after the faults stopped: {why}")
        return
    _orphans(run)
    _tally(run)


def _orphans(run: Run) -> None:
    """Every live process is listed in the state, but the strays a restored state
    lost: those the docs have the controller report and leave running (an event of
    its service; of a service the state does not list, a line in its log only)."""
    alive = {pid for pid in run.backend.replicas if run.backend.alive(pid)}
    reported = "\n".join([run.watch.strays(), *run.stray_lines]) if run.restores else ""
    orphans = sorted(pid for pid in alive - run.watch.pids() if f"process {pid} (" not in reported)
    if orphans:
        run._violate("ends", f"orphan process(es) {orphans}: no replica lists them")
    tags: dict[str, int] = {}
    for pid in sorted(alive):  # a new replica never shares a stray's tag (recovery.py)
        tag = run.machine.tag_of(pid)
        if tag is not None and tags.setdefault(tag, pid) != pid:
            run._violate(
                "ends",
                f"processes {tags[tag]} and {pid} both carry the tag of {tag.split('/', 1)[1]}",
            )


def _tally(run: Run) -> None:
    for mode, status in run.watch.db.execute("SELECT mode, status FROM updates"):
        key = f"{mode} {status}"
        run.result.ended[key] = run.result.ended.get(key, 0) + 1
