"""Shared fixtures: each test that starts SteadyServe gets its own STEADY_HOME,
and leaves no process of it behind (checked, and cleaned, at teardown)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from steadyserve.store import STRICT_MOVES_ENV
from tests.helpers.raycluster import RayCluster
from tests.helpers.steady import Steady, processes_of_home

# The CLI's tables fold at COLUMNS when it is set, else at the width for a pipe; the
# tests check what a pipe gets. pytest-xdist's workers run with COLUMNS=80 and
# LINES=24 in their environment, which folded the tables the tests read (7 failures
# under -n 2), so no test (nor a command it runs) sees the runner's terminal size.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# A move outside UPDATE_MOVES / OUTCOME_MOVES raises in every test, also inside the
# controllers the end-to-end tests start (they inherit the environment).
os.environ.setdefault(STRICT_MOVES_ENV, "1")

# Hypothesis's per-example deadline is a wall-clock assertion: on a busy 2-core
# machine a 200 ms example took 641 ms and failed a test whose logic was right.
# Tests here check answers, never speed (bench/ measures that).
settings.register_profile("steadyserve", deadline=None)
settings.load_profile("steadyserve")


@pytest.fixture(autouse=True)
def _multiplexing_is_per_test() -> Iterator[None]:
    """Whether this process defined a ``@serve.multiplexed`` method is process-wide
    (a runner hosts one replica); in this one process each test starts from what
    it was before, so a ported Ray test defining one does not make a later test's
    replica state report models."""
    from steadyserve.serve import multiplex

    saved = multiplex._declared
    yield
    multiplex._declared = saved


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """Two Ray nodes in two network namespaces (tests/helpers/raycluster.py)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("STEADY_REQUIRE_RAY"):
            raise
        pytest.skip("Ray is not installed (pip install -e '.[test,ray]')")
    if os.geteuid() != 0:
        pytest.skip("the Ray cluster's network namespaces need root")
    cluster = RayCluster(tmp_path_factory.mktemp("ray"))
    try:
        cluster.start()
        assert cluster.listening_outside() == [], "a Ray process listens outside its namespace"
        yield cluster
        assert cluster.listening_outside() == [], "a Ray process listens outside its namespace"
    finally:
        cluster.stop()


@pytest.fixture
def steady(request: pytest.FixtureRequest) -> Iterator[Steady]:
    backend = getattr(request, "param", "local")
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        if backend == "ray":
            cluster: RayCluster = request.getfixturevalue("ray_cluster")
            env = {"STEADY_BACKEND": "ray", "STEADY_RAY_ADDRESS": cluster.address}
            with cluster.entered():
                yield from _steady_in(Steady(home, env), home)
        else:
            yield from _steady_in(Steady(home), home)


def _steady_in(cli: Steady, home: Path) -> Iterator[Steady]:
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


FIGURE_KEY = "steadyserve_figure"
_SHOWN: list[str] = []  # what the summary prints, gathered from every test's report


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test's figures travel in its report: with pytest-xdist the tests run in
    worker processes and only their reports reach the process that prints."""
    from tests.helpers.figures import FIGURES

    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.user_properties.extend((FIGURE_KEY, line) for line in FIGURES)
    FIGURES.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _SHOWN.extend(str(value) for key, value in report.user_properties if key == FIGURE_KEY)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SHOWN:
        terminalreporter.section("SteadyServe figures (requests sent / failed, faults)")
        for line in _SHOWN:
            terminalreporter.write_line(line)
