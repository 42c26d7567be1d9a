"""Shared fixtures: each test that starts SteadyServe gets its own STEADY_HOME,
and leaves no process of it behind (checked, and cleaned, at teardown)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.steady import Steady, processes_of_home


@pytest.fixture
def steady() -> Iterator[Steady]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        cli = Steady(home)
        try:
            yield cli
        finally:
            if home.exists():
                cli.run("down", "--all", check=False, timeout=120)
                cli.run("controller", "stop", check=False, timeout=60)
            deadline = time.monotonic() + 10
            left = processes_of_home(home)
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = processes_of_home(home)
            for proc in left:
                proc.kill()
            assert not left, f"orphan processes left behind: {[p.cmdline() for p in left]}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.helpers.figures import FIGURES

    if FIGURES:
        terminalreporter.section("SteadyServe figures (requests sent / failed, faults)")
        for line in FIGURES:
            terminalreporter.write_line(line)
