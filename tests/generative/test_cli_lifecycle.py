"""The ``steady`` life cycle in any order, against a small model of what it promises.

A hypothesis state machine runs ``steady up / update / rollback / deploy / down
[--purge]`` with generated valid service files (a few names, so that they collide;
a restart change and an in-place change) on the fake backend (replicas are
records answered by the controller itself: src/steadyserve/backends/fake.py), and
after every command compares the exit code with the model's (0, or 2 for a
refusal that changes nothing) and the services the controller lists (which are
up, at which version, all replicas READY) with the model's. The commands run in
this process (click's runner) against one real controller per module, so a step
costs the command's own work, not a Python start. A long run:
bench/generative_long.py --surface cli.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from steadyserve.cli.main import main
from steadyserve.client.connection import Client
from steadyserve.home.paths import Home
from tests.helpers.steady import Steady, processes_of_home

NAMES = ("s1", "s2", "s3")


@dataclass(frozen=True)
class Spec:
    """The part of a service file that varies: a restart field and an in-place one."""

    name: str
    env: int  # envs.X: a restart update
    message: int  # user_config.message: an in-place update
    replicas: int

    def document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "service": {
                "readiness_probe": "/",
                "replicas": self.replicas,
                "health_check_period_s": 0.1,
                "graceful_shutdown_wait_loop_s": 0.05,
                "graceful_shutdown_timeout_s": 1,
                "reconfigure_path": "/-/reconfigure",
                "user_config": {"message": self.message},
            },
            "run": "true  # not run: STEADY_BACKEND=fake",
            "envs": {"X": str(self.env)},
        }


specs = st.builds(
    Spec,
    name=st.sampled_from(NAMES),
    env=st.integers(1, 2),
    message=st.integers(1, 2),
    replicas=st.integers(1, 2),
)


@dataclass
class Service:
    """The model of one service: its versions' specs (1-based), the version
    running, and whether the fleet file owns it."""

    versions: list[Spec]
    version: int
    up: bool = True
    fleet: bool = False


@dataclass
class World:
    """The model: every service the controller knows (up, or down with history)."""

    services: dict[str, Service] = field(default_factory=dict)

    def running(self) -> dict[str, int]:
        return {n: s.version for n, s in self.services.items() if s.up}

    def with_history(self) -> list[str]:
        """Running services with an earlier version to go back to."""
        return sorted(n for n, s in self.services.items() if s.up and len(s.versions) > 1)

    def current(self, name: str) -> Spec:
        known = self.services[name]
        return known.versions[known.version - 1]


class Cli:
    """``steady`` in this process, in one home, on the fake backend."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {"STEADY_HOME": str(home), "STEADY_BACKEND": "fake"}
        self.runner = CliRunner()
        self.last = ""  # the last command, its exit code and output (for a failure's message)

    def __call__(self, *args: str) -> int:
        result = self.runner.invoke(main, list(args), env=self.env, catch_exceptions=False)
        Lifecycle.calls[f"{args[0]} exit {result.exit_code}"] += 1
        self.last = f"steady {' '.join(args)} -> {result.exit_code}: {result.output[-300:]}"
        return result.exit_code

    def services(self) -> dict[str, dict[str, Any]]:
        saved = os.environ.get("STEADY_HOME")
        client = Client(Home(self.home))
        listed = client.call("GET", "/api/v1/services")["services"]
        assert saved == os.environ.get("STEADY_HOME")
        return {s["name"]: s for s in listed}


def stop_home(home: Path) -> None:
    """Take every service down, stop the controller, and leave no process behind."""
    steady = Steady(home, {"STEADY_BACKEND": "fake"})
    if home.exists():
        steady.run("down", "--all", "--purge", "-y", check=False, timeout=120)
        steady.run("controller", "stop", check=False, timeout=60)
    left = processes_of_home(home)
    for proc in left:
        proc.kill()
    assert not left, f"orphan processes: {[p.cmdline() for p in left]}"


@pytest.fixture(scope="module")
def cli() -> Iterator[Cli]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        try:
            yield Cli(home)
        finally:
            stop_home(home)


class Lifecycle(RuleBasedStateMachine):
    """One example: a sequence of commands from an empty home (as the model sees it)."""

    cli: Cli
    files: Path
    # Commands run, by command and exit code (the bench prints them).
    calls: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.world = World()

    @initialize(spec=specs)
    def first_up(self, spec: Spec) -> None:
        """From no service and no history, one ``steady up``: every example runs
        something (hypothesis tries short sequences first, often none at all)."""
        self.empty()
        self.up(spec)

    def empty(self) -> None:
        # Each example starts from no service and no history: --all takes down what
        # runs; a service an earlier example left down keeps its history until
        # purged by name (else a later "down NAME --purge" finds it).
        assert self.cli("down", "--all", "--purge", "-y") == 0
        for name in NAMES:
            assert self.cli("down", name, "--purge") in (0, 2), self.cli.last
        assert self.cli.services() == {}

    def write(self, spec: Spec) -> Path:
        path = self.files / f"{spec.name}.yaml"
        path.write_text(json.dumps(spec.document()))
        return path

    @rule(spec=specs)
    def up(self, spec: Spec) -> None:
        code = self.cli("up", str(self.write(spec)), "--wait", "--timeout", "60")
        known = self.world.services.get(spec.name)
        if known is not None and known.up:
            assert code == 2, f"up of a running service is refused: {self.cli.last}"
            return
        assert code == 0, self.cli.last
        # A service taken down with its history kept starts again at version 1.
        self.world.services[spec.name] = Service([spec], 1)

    # Commands on a running service have rules of their own, besides the ones on
    # any name: drawn from all names, the refusals crowded out the changes.
    @precondition(lambda self: bool(self.world.running()))
    @rule(data=st.data())
    def update_running(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.world.running())))
        self.update(data.draw(specs.map(lambda s: replace(s, name=name))))

    @precondition(lambda self: bool(self.world.with_history()))
    @rule(data=st.data())
    def rollback_running(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self.world.with_history()))
        versions = len(self.world.services[name].versions)
        self.rollback(name, data.draw(st.one_of(st.none(), st.integers(1, versions))))

    @precondition(lambda self: bool(self.world.services))
    @rule(data=st.data(), purge=st.booleans())
    def down_known(self, data: st.DataObject, purge: bool) -> None:
        self.down(data.draw(st.sampled_from(sorted(self.world.services))), purge)

    @rule(spec=specs)
    def update(self, spec: Spec) -> None:
        code = self.cli("update", spec.name, str(self.write(spec)), "--wait", "--timeout", "60")
        known = self.world.services.get(spec.name)
        if known is None or not known.up:
            assert code == 2, self.cli.last
            return
        assert code == 0, self.cli.last
        if spec != known.versions[known.version - 1]:
            known.versions.append(spec)
            known.version = len(known.versions)

    @rule(name=st.sampled_from(NAMES), to=st.one_of(st.none(), st.integers(1, 4)))
    def rollback(self, name: str, to: int | None) -> None:
        args = ["rollback", name, "--wait", "--timeout", "60"]
        if to is not None:
            args += ["--to", str(to)]
        code = self.cli(*args)
        known = self.world.services.get(name)
        if known is None or not known.up:
            assert code == 2, self.cli.last
            return
        target = known.version - 1 if to is None else to
        if not 1 <= target <= len(known.versions) or target == known.version:
            assert code == 2, f"rollback to {target} of {len(known.versions)}: {self.cli.last}"
            return
        assert code == 0, self.cli.last
        spec = known.versions[target - 1]
        if spec != known.versions[known.version - 1]:
            known.versions.append(spec)
            known.version = len(known.versions)

    @rule(listed=st.lists(specs, max_size=2, unique_by=lambda s: s.name))
    def deploy(self, listed: list[Spec]) -> None:
        if not listed:
            return
        fleet = self.files / "fleet.yaml"
        fleet.write_text(json.dumps({"services": [s.document() for s in listed]}))
        assert self.cli("deploy", str(fleet), "--wait", "--timeout", "60", "-y") == 0
        names = {s.name for s in listed}
        for name, known in self.world.services.items():
            if known.up and known.fleet and name not in names:
                known.up = False  # made by this file, no longer in it
        for spec in listed:
            known = self.world.services.get(spec.name)
            if known is None or not known.up:
                self.world.services[spec.name] = Service([spec], 1, fleet=True)
                continue
            known.fleet = True
            if spec != known.versions[known.version - 1]:
                known.versions.append(spec)
                known.version = len(known.versions)

    @rule(name=st.sampled_from(NAMES), purge=st.booleans())
    def down(self, name: str, purge: bool) -> None:
        code = self.cli("down", name, *(["--purge"] if purge else []))
        known = self.world.services.get(name)
        if known is None or (not known.up and not purge):
            assert code == 2, self.cli.last
            return
        assert code == 0, self.cli.last
        if purge:
            del self.world.services[name]
        else:
            known.up = False

    @invariant()
    def the_controller_lists_what_the_model_holds(self) -> None:
        listed = self.cli.services()
        assert {n: s["version"] for n, s in listed.items()} == self.world.running()
        # Every service READY at full strength: at once after "up --wait" or a
        # restart update's --wait; an update that also scales up in place has
        # finished once its version serves alone (docs/design.md), its new
        # replicas still starting, so the strength is waited for (bounded).
        deadline = time.monotonic() + 15
        while True:
            strength = {n: (s["status"], s["ready_replicas"]) for n, s in listed.items()}
            want = {n: ("READY", self.world.current(n).replicas) for n in listed}
            if strength == want or time.monotonic() > deadline:
                break
            time.sleep(0.1)
            listed = self.cli.services()
        assert strength == want


@pytest.fixture
def lifecycle(cli: Cli, tmp_path: Path) -> type[Lifecycle]:
    Lifecycle.cli = cli
    Lifecycle.files = tmp_path
    return Lifecycle


def test_the_cli_life_cycle_follows_its_model(lifecycle: type[Lifecycle]) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        lifecycle, settings=settings(max_examples=10, stateful_step_count=8, deadline=None)
    )
    print(dict(sorted(Lifecycle.calls.items())))  # what ran (pytest -s shows it)
