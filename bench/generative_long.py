"""The generative tests of the public surfaces, run long (the suite runs a few
hundred examples each: tests/generative/).

    python bench/generative_long.py --surface lb --examples 20000
    python bench/generative_long.py --surface mutated --examples 20000
    python bench/generative_long.py --surface responses --examples 20000
    python bench/generative_long.py --surface cli --examples 200
    python bench/generative_long.py --surface serve --examples 50

Each surface runs the same check its test in tests/generative/ runs, with more
examples and a fresh random seed (``--seed`` for a fixed one). Prints the examples
run, examples per second, and the first counter-example hypothesis found (shrunk),
which belongs in the test as an ``@example`` once its defect is fixed. Exits 1 on a
counter-example.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def lb_surface(examples: int) -> tuple[Callable[[], None], list[int]]:
    from tests.generative.heads import requests
    from tests.generative.test_request_head_h11 import check

    loop = asyncio.new_event_loop()
    count = [0]

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(reqs=st.lists(requests(), min_size=1, max_size=3))
    def run(reqs: list) -> None:  # type: ignore[type-arg]
        count[0] += 1
        check(loop, reqs)

    return run, count


def mutated_surface(examples: int) -> tuple[Callable[[], None], list[int]]:
    from tests.generative.test_mutated_requests import check, mutated

    loop = asyncio.new_event_loop()
    count = [0]

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(raw=mutated())
    def run(raw: bytes) -> None:
        count[0] += 1
        check(loop, raw)

    return run, count


def responses_surface(examples: int) -> tuple[Callable[[], None], list[int]]:
    from tests.generative.test_response_framing_h11 import check, responses

    loop = asyncio.new_event_loop()
    count = [0]

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(r=responses())
    def run(r: object) -> None:
        count[0] += 1
        check(loop, r)  # type: ignore[arg-type]

    return run, count


def cli_surface(examples: int) -> tuple[Callable[[], None], list[int]]:
    import tempfile

    from hypothesis.stateful import run_state_machine_as_test
    from tests.generative.test_cli_lifecycle import Cli, Lifecycle, stop_home

    count = [0]

    class Counted(Lifecycle):
        def __init__(self) -> None:
            super().__init__()
            count[0] += 1

    def run() -> None:
        with tempfile.TemporaryDirectory(prefix="steady-bench-") as tmp:
            home = Path(tmp) / "home"
            Counted.cli = Cli(home)
            Counted.files = Path(tmp)
            try:
                run_state_machine_as_test(
                    Counted,
                    settings=settings(
                        max_examples=examples,
                        stateful_step_count=10,
                        deadline=None,
                        database=None,
                        suppress_health_check=list(HealthCheck),
                    ),
                )
            finally:
                stop_home(home)
            print(f"commands: {dict(sorted(Counted.calls.items()))}")

    return run, count


def serve_surface(examples: int) -> tuple[Callable[[], None], list[int]]:
    import os
    import tempfile

    from hypothesis.stateful import run_state_machine_as_test
    from tests.generative.test_serve_api import Driver, ServeApi, free_port
    from tests.helpers.steady import Steady, processes_of_home

    from steadyserve import serve

    count = [0]

    class Counted(ServeApi):
        def __init__(self) -> None:
            super().__init__()
            count[0] += 1

    def run() -> None:
        with tempfile.TemporaryDirectory(prefix="steady-bench-") as tmp:
            home = Path(tmp) / "home"
            port = free_port()
            os.environ["STEADY_HOME"] = str(home)
            os.environ["STEADY_SERVE_HTTP_PORT"] = str(port)
            Counted.driver = Driver(home, port)
            try:
                run_state_machine_as_test(
                    Counted,
                    settings=settings(
                        max_examples=examples,
                        stateful_step_count=10,
                        deadline=None,
                        database=None,
                        suppress_health_check=list(HealthCheck),
                    ),
                )
            finally:
                serve.shutdown()
                steady = Steady(home)
                steady.run("down", "--all", "--purge", "-y", check=False, timeout=120)
                steady.run("controller", "stop", check=False, timeout=60)
                for proc in processes_of_home(home):
                    proc.kill()
            print(f"calls: {dict(sorted(Counted.calls.items()))}")

    return run, count


SURFACES = {
    "lb": lb_surface,
    "mutated": mutated_surface,
    "responses": responses_surface,
    "cli": cli_surface,
    "serve": serve_surface,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--surface", choices=sorted(SURFACES), default="lb")
    p.add_argument("--examples", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    run, count = SURFACES[args.surface](args.examples)
    if args.seed is not None:
        run = seed(args.seed)(run)
    started = time.monotonic()
    found = 0
    try:
        run()
    except Exception:
        found = 1
        traceback.print_exc()
    took = time.monotonic() - started
    print(
        f"surface={args.surface} examples={count[0]} seconds={took:.1f} "
        f"examples/s={count[0] / took:.1f} counter-examples={found}"
    )
    return found


if __name__ == "__main__":
    sys.exit(main())
