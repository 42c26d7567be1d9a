"""``python -m steadyserve.sim``: run schedules, replay one, or check the checker.

- ``run --schedules N --seed S`` runs the schedules of seeds S .. S+N-1 and ends with
  ``schedules=N steps=T violations=V`` (exit 1 when V > 0, after printing each
  violation's seed and its shrunk schedule, replayable as printed).
- ``replay --seed X`` or ``replay --schedule JSON`` (``@FILE`` reads a file) runs one
  schedule again; ``--trace`` prints its trace, the same bytes on every replay.
- ``self-check`` runs each mutant of sim/mutants.py until the invariant it targets
  catches it, and ends with ``mutants caught K/M`` (exit 1 when K < M).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from steadyserve.sim.mutants import MAX_SCHEDULES, MUTANTS, Mutant
from steadyserve.sim.runner import Result, run
from steadyserve.sim.schedule import Schedule, draw
from steadyserve.sim.shrink import shrink


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m steadyserve.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run", help="run N schedules from a seed")
    one.add_argument("--schedules", type=int, default=100)
    one.add_argument("--seed", type=int, default=1)
    one.add_argument("--no-shrink", action="store_true", help="print violations unshrunk")
    again = sub.add_parser("replay", help="run one schedule again")
    which = again.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int)
    which.add_argument("--schedule", help="a schedule as printed (JSON), or @FILE")
    again.add_argument("--trace", action="store_true", help="print the run's trace")
    check = sub.add_parser("self-check", help="show every mutant is caught")
    check.add_argument("--seed", type=int, default=1)
    check.add_argument("--mutants", default="", help="comma-separated names (default: all)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        if args.schedules < 1:
            print("--schedules must be at least 1", file=sys.stderr)
            return 2
        return _run(args.schedules, args.seed, shrinking=not args.no_shrink)
    if args.command == "replay":
        return _replay(args.seed, args.schedule, args.trace)
    return _self_check(args.seed, [n for n in args.mutants.split(",") if n])


def _report(result: Result, shrinking: bool) -> None:
    first = result.violations[0]
    print(f"seed {result.schedule.seed}: {first}")
    schedule = result.schedule
    if shrinking:

        def fails(candidate: Schedule) -> bool:
            return any(v.invariant == first.invariant for v in run(candidate).violations)

        schedule = shrink(schedule, fails)
    print(f"  replay: python -m steadyserve.sim replay --schedule '{schedule.to_json()}'")


def _run(count: int, seed: int, *, shrinking: bool) -> int:
    started = time.process_time()
    steps = violations = restarts = requests = 0
    ended: Counter[str] = Counter()
    canary: Counter[str] = Counter()
    longest = 0
    for n in range(count):
        result = run(draw(seed + n))
        steps += result.steps
        longest = max(longest, result.steps)
        restarts += result.restarts
        requests += result.requests
        ended.update(result.ended)
        canary.update(result.canary)
        if result.violations:
            violations += 1
            _report(result, shrinking)
    cpu = time.process_time() - started
    print(
        f"cpu={cpu:.1f}s steps/s={steps / max(cpu, 1e-9):.0f} longest={longest} "
        f"controller_restarts={restarts} requests={requests}"
    )
    for title, counts in (("updates ended", ended), ("canary verdicts", canary)):
        print(f"{title}: " + (", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "none"))
    print(f"schedules={count} steps={steps} violations={violations}")
    return 1 if violations else 0


def _replay(seed: int | None, text: str | None, trace: bool) -> int:
    if seed is not None:
        schedule = draw(seed)
    else:
        assert text is not None
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        try:
            schedule = Schedule.from_json(raw)
        except (ValueError, KeyError, TypeError) as exc:
            print(f"--schedule: not a schedule as printed: {exc}", file=sys.stderr)
            return 2
    result = run(schedule)
    if trace:
        sys.stdout.write(result.trace_bytes().decode())
    for violation in result.violations:
        print(f"seed {schedule.seed}: {violation}")
    print(f"schedules=1 steps={result.steps} violations={1 if result.violations else 0}")
    return 1 if result.violations else 0


def catch(mutant: Mutant, seed: int, limit: int = MAX_SCHEDULES) -> tuple[int | None, int]:
    """The number of schedules it took the targeted invariant to catch ``mutant``
    (None: not within ``limit``), and the steps of the schedule that caught it.
    Schedules that cannot reach the mutated decision count but are not run."""
    with mutant.patch():
        for n in range(limit):
            schedule = draw(seed + n)
            if not mutant.reaches(schedule):
                continue
            result = run(schedule)
            if any(v.invariant == mutant.targets for v in result.violations):
                return n + 1, result.steps
    return None, 0


def _self_check(seed: int, names: list[str]) -> int:
    chosen = [m for m in MUTANTS if not names or m.name in names]
    unknown = set(names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"--mutants: no mutant named {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    caught = 0
    for mutant in chosen:
        took, steps = catch(mutant, seed)
        if took is None:
            print(f"{mutant.name}: NOT caught by {mutant.targets} in {MAX_SCHEDULES} schedules")
        else:
            caught += 1
            print(
                f"{mutant.name}: caught by {mutant.targets} after {took} schedule(s) "
                f"(that schedule: {steps} steps)"
            )
    print(f"mutants caught {caught}/{len(chosen)}")
    return 0 if caught == len(chosen) else 1
