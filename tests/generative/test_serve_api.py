"""Ray Serve's driver API in any order, against a small model of Ray's rules.

A hypothesis state machine calls ``serve.run`` (two application names, route
prefixes that collide or not, ``.options(user_config=...)`` and bind arguments
that change or not), ``serve.delete``, ``serve.shutdown``, ``serve.status`` and
``serve.get_app_handle`` on one real controller (local backend: each replica a
real process), and after every call compares what the API, the handles and the
gateway's HTTP answers show with the model: which applications run, which
prefix routes to which, what each answers, and which calls Ray refuses (a prefix
another application holds; a handle to an application that is not there).
Replicas are real processes, so examples are few; a long run:
bench/generative_long.py --surface serve.
"""

from __future__ import annotations

import http.client
import os
import socket
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from steadyserve import serve
from steadyserve.serve.exceptions import RayServeException
from tests.helpers.steady import Steady, processes_of_home

APPS = ("a", "b")
PREFIXES = ("/", "/p", "/p/q", None)


@serve.deployment(graceful_shutdown_timeout_s=1, graceful_shutdown_wait_loop_s=0.05)
class Echo:
    """Answers with its bind argument (a restart to change) and its user_config's
    tag (changed in place), so every answer says which version gave it."""

    def __init__(self, word: str) -> None:
        self.word = word
        self.tag = 0

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.tag = int(config["tag"])

    async def __call__(self, request: Any) -> str:
        return f"{self.word}:{self.tag}"


@dataclass(frozen=True)
class App:
    prefix: str | None
    word: str
    tag: int

    @property
    def answer(self) -> str:
        return f"{self.word}:{self.tag}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def owner(apps: dict[str, App], path: str) -> App | None:
    """The application a path routes to: the longest prefix that matches it whole
    segments (Ray's proxy rule)."""
    best: App | None = None
    for app in apps.values():
        p = app.prefix
        if p is None:
            continue
        if (p == "/" or path == p or path.startswith(p + "/")) and (
            best is None or len(p) > len(best.prefix or "")
        ):
            best = app
    return best


@dataclass
class Driver:
    home: Path
    port: int


@pytest.fixture(scope="module")
def driver() -> Iterator[Driver]:
    """A home and its gateway port, this process its driver (as
    tests/e2e/test_serve_run.py starts it)."""
    saved = {k: os.environ.get(k) for k in ("STEADY_HOME", "STEADY_SERVE_HTTP_PORT")}
    with tempfile.TemporaryDirectory(prefix="steady-serve-") as tmp:
        home = Path(tmp) / "home"
        port = free_port()
        os.environ["STEADY_HOME"] = str(home)
        os.environ["STEADY_SERVE_HTTP_PORT"] = str(port)
        cli = Steady(home)
        try:
            yield Driver(home, port)
        finally:
            serve.shutdown()
            cli.run("down", "--all", "--purge", "-y", check=False, timeout=120)
            cli.run("controller", "stop", check=False, timeout=60)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            left = processes_of_home(home)
            for proc in left:
                proc.kill()
            assert not left, f"orphans: {[p.cmdline() for p in left]}"


class ServeApi(RuleBasedStateMachine):
    driver: Driver
    # Calls made, by rule and outcome (the bench prints them).
    calls: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.apps: dict[str, App] = {}

    @initialize(
        name=st.sampled_from(APPS),
        prefix=st.sampled_from(PREFIXES),
        word=st.sampled_from(["x", "y"]),
        tag=st.integers(1, 2),
    )
    def first_run(self, name: str, prefix: str | None, word: str, tag: int) -> None:
        """From no application, one ``serve.run``: every example deploys something
        (hypothesis tries short sequences first, often none at all)."""
        serve.shutdown()
        assert serve.status().applications == {}
        self.run(name, prefix, word, tag)

    @rule(
        name=st.sampled_from(APPS),
        prefix=st.sampled_from(PREFIXES),
        word=st.sampled_from(["x", "y"]),
        tag=st.integers(1, 2),
    )
    def run(self, name: str, prefix: str | None, word: str, tag: int) -> None:
        app = Echo.options(user_config={"tag": tag}).bind(word)
        holders = [n for n, a in self.apps.items() if n != name and prefix and a.prefix == prefix]
        if holders:
            # Refused, nothing changed, naming the holder (docs/ray-serve-api.md; in
            # SteadyServe's words, not Ray's: the holder is named as its service).
            with pytest.raises(RayServeException, match=f"served by service {holders[0]}-echo"):
                serve.run(app, name=name, route_prefix=prefix)
            self.calls["run refused: prefix taken"] += 1
            return
        self.calls["run (an update)" if name in self.apps else "run"] += 1
        handle = serve.run(app, name=name, route_prefix=prefix)
        self.apps[name] = App(prefix, word, tag)
        assert handle.remote("r").result() == self.apps[name].answer

    # Calls on an application that runs, and on one that does not, are separate
    # rules: drawn from all names, the second kind crowded out the first.
    @precondition(lambda self: bool(self.apps))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.apps)))
        serve.delete(name)
        del self.apps[name]
        self.calls["delete"] += 1

    @precondition(lambda self: len(self.apps) < len(APPS))
    @rule(data=st.data())
    def delete_of_nothing(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([n for n in APPS if n not in self.apps]))
        serve.delete(name)  # Ray: nothing to do, no error
        self.calls["delete of nothing"] += 1

    @precondition(lambda self: bool(self.apps))  # else it crowds out the other rules
    @rule()
    def shutdown(self) -> None:
        serve.shutdown()
        self.apps.clear()
        self.calls["shutdown"] += 1

    @precondition(lambda self: bool(self.apps))
    @rule(data=st.data())
    def get_app_handle(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.apps)))
        self.calls["get_app_handle"] += 1
        assert serve.get_app_handle(name).remote("r").result() == self.apps[name].answer

    @precondition(lambda self: len(self.apps) < len(APPS))
    @rule(data=st.data())
    def get_app_handle_of_nothing(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([n for n in APPS if n not in self.apps]))
        with pytest.raises(RayServeException):
            serve.get_app_handle(name)
        self.calls["get_app_handle refused"] += 1

    @invariant()
    def status_lists_the_running_applications(self) -> None:
        applications = serve.status().applications
        assert set(applications) == set(self.apps)
        assert {n: a.status for n, a in applications.items()} == {n: "RUNNING" for n in self.apps}

    @invariant()
    def each_path_reaches_the_application_of_its_longest_prefix(self) -> None:
        routed = any(a.prefix is not None for a in self.apps.values())
        for path in ("/", "/p", "/p/q", "/p/qr"):
            want = owner(self.apps, path)
            try:
                status, body = http_get(self.driver.port, path)
            except ConnectionRefusedError:
                # No gateway yet, or none since shutdown (as Ray's proxy): only
                # when no application has a route.
                assert not routed, path
                continue
            if want is None:
                assert status == 404, (path, status, body)
            else:
                assert (status, body) == (200, want.answer), path


def test_the_serve_api_follows_its_model(driver: Driver) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    ServeApi.driver = driver
    run_state_machine_as_test(
        ServeApi, settings=settings(max_examples=6, stateful_step_count=6, deadline=None)
    )
    print(dict(sorted(ServeApi.calls.items())))  # what ran (pytest -s shows it)
