"""bench/generative_long.py runs the same checks as these tests: a few examples of
the two surfaces that need no controller, so that the long run cannot rot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "generative_long.py"


@pytest.mark.parametrize("surface", ["lb", "responses"])
def test_the_long_run_runs_and_counts_its_examples(surface: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--surface", surface, "--examples", "20", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"surface={surface} examples=20 seconds=[\d.]+ examples/s=[\d.]+ counter-examples=0",
        last,
    ), last
