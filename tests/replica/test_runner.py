"""``python -m steadyserve.replica`` as a real process: the controller's protocol.

Each app waits on gate files the test creates, so nothing depends on timing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.replica._proc import HOST, Replica, refuses, request, wait_until

GATES = """
    import os
    import pathlib
    import time

    GATES = pathlib.Path(os.environ["TEST_GATES"])

    def wait_for(name, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not (GATES / name).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {name} never opened")
            time.sleep(0.01)
"""

MODEL = (
    GATES
    + """
    class Model:
        def __init__(self):
            wait_for("loaded")  # a long model load, ended by the test
            self.word = None

        def reconfigure(self, config):
            if not isinstance(config.get("word"), str):
                raise ValueError("word must be a string")
            self.word = config["word"]

        def check_health(self):
            if (GATES / "sick").exists():
                raise RuntimeError("disk\\nfull")

        async def __call__(self, request):
            if request.url.path == "/stream":
                return self.stream()
            if request.url.path == "/endless":
                return self.endless()
            return {"word": self.word, "pid": os.getpid()}

        def stream(self):
            yield "one\\n"
            wait_for("two")
            yield "two\\n"

        def endless(self):
            try:
                yield "first\\n"
                for i in range(3000):  # 30 s at most, longer than the test waits
                    time.sleep(0.01)
                    yield f"{i}\\n"
            finally:
                (GATES / "endless-closed").touch()
"""
)

SLOW = (
    GATES
    + """
    import asyncio

    class Slow:
        async def __call__(self, request):
            (GATES / "started").touch()
            for _ in range(2000):
                if (GATES / "finish").exists():
                    return "finished"
                await asyncio.sleep(0.01)
            return "gave up"
"""
)

ASGI = """
    import contextlib

    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    @contextlib.asynccontextmanager
    async def lifespan(app):
        app.state.greeting = "started by lifespan"
        yield

    async def home(request):
        return PlainTextResponse(request.app.state.greeting)

    app = Starlette(routes=[Route("/", home)], lifespan=lifespan)

    @contextlib.asynccontextmanager
    async def no_database(app):
        raise RuntimeError("database unreachable")
        yield

    failing = Starlette(routes=[Route("/", home)], lifespan=no_database)
"""

BROKEN = """
    from steadyserve.replica import deployment

    class BrokenInit:
        def __init__(self):
            raise RuntimeError("no weights here")

        def __call__(self, request):
            return "never"

    @deployment(user_config={"threshold": 2})
    class BrokenConfig:
        def reconfigure(self, config):
            raise ValueError(f"threshold {config['threshold']} is too high")

        def __call__(self, request):
            return "never"

    @deployment(num_replicas=3, max_ongoing_requests=7)
    class Described:
        def __call__(self, request):
            return "ok"

    print("module chatter on stdout")
"""


def workdir(tmp: Path, name: str, source: str) -> Path:
    path = tmp / name
    (path / "gates").mkdir(parents=True)
    (path / f"{name}.py").write_text(textwrap.dedent(source))
    return path


@dataclass
class Started:
    replica: Replica
    gates: Path
    initializing: tuple[int, Any]
    app_port_refused_while_initializing: bool


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """One Model replica for the tests that only talk to it; started as the
    controller would, watched through its initialization."""
    wd = workdir(tmp_path_factory.mktemp("runner"), "model", MODEL)
    gates = wd / "gates"
    env = {"TEST_GATES": str(gates), "STEADY_USER_CONFIG": json.dumps({"word": "initial"})}
    with Replica(wd, "model:Model", env) as replica:
        initializing = replica.wait_health(503)
        refused = refuses(replica.port)
        status = replica.health()
        (gates / "loaded").touch()
        replica.wait_health(200)
        assert status is not None
        yield Started(replica, gates, status, refused and initializing == status[1])


def test_initializing_then_ready(model: Started) -> None:
    assert model.initializing == (503, {"status": "initializing"})
    assert model.app_port_refused_while_initializing
    assert model.replica.control("GET", "/-/healthz") == (200, {"status": "ok"})


def test_first_user_config_is_applied_before_ready(model: Started) -> None:
    # Runs before any test reconfigures (file order); the word is the env's.
    status, body = model.replica.app()
    assert status == 200
    assert json.loads(body) == {"word": "initial", "pid": model.replica.proc.pid}


def test_info(model: Started) -> None:
    status, info = model.replica.control("GET", "/-/info")
    assert status == 200
    assert info["kind"] == "class"
    assert info["options"] == {}
    assert info["import_path"] == "model:Model"
    assert info["pid"] == model.replica.proc.pid
    assert info["status"] == "ready"


def test_reconfigure_changes_the_answer_in_the_same_process(model: Started) -> None:
    replica = model.replica
    for word in ("alpha", "beta"):
        assert replica.control("POST", "/-/reconfigure", {"word": word}) == (200, {"status": "ok"})
        status, body = replica.app()
        assert (status, json.loads(body)) == (200, {"word": word, "pid": replica.proc.pid})


def test_reconfigure_that_raises_is_500_and_the_old_config_answers(model: Started) -> None:
    replica = model.replica
    assert replica.control("POST", "/-/reconfigure", {"word": "kept"})[0] == 200
    status, answer = replica.control("POST", "/-/reconfigure", {"word": 5})
    assert (status, answer) == (500, {"error": "ValueError: word must be a string"})
    assert json.loads(replica.app()[1])["word"] == "kept"
    assert "Traceback" in replica.stderr  # the full story is in the replica's log


def test_check_health_raising_is_503_until_it_passes(model: Started) -> None:
    sick = model.gates / "sick"
    sick.touch()
    try:
        assert model.replica.control("GET", "/-/healthz") == (
            503,
            {"status": "unhealthy", "error": "RuntimeError: disk full"},
        )
    finally:
        sick.unlink()
    assert model.replica.control("GET", "/-/healthz") == (200, {"status": "ok"})


def test_control_paths_are_not_served_on_the_app_port(model: Started) -> None:
    status, body = model.replica.app("/-/healthz")
    assert status == 200
    assert json.loads(body)["word"]  # it is the user's __call__ answering, not the runner


def test_a_generator_arrives_chunk_by_chunk(model: Started) -> None:
    import http.client

    conn = http.client.HTTPConnection(HOST, model.replica.port, timeout=10)
    try:
        conn.request("GET", "/stream")
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("transfer-encoding") == "chunked"
        # The second chunk cannot exist before the gate opens: the first arrived alone.
        assert response.readline() == b"one\n"
        (model.gates / "two").touch()
        assert response.readline() == b"two\n"
        assert response.read() == b""
    finally:
        conn.close()


def test_a_sync_generator_is_closed_when_its_client_goes_away(model: Started) -> None:
    closed = model.gates / "endless-closed"
    with socket.create_connection((HOST, model.replica.port), timeout=10) as sock:
        sock.sendall(b"GET /endless HTTP/1.1\r\nHost: test\r\n\r\n")
        received = b""
        for _ in range(100):
            received += sock.recv(4096)
            if b"first" in received:
                break
        assert b"first" in received
        assert not closed.exists()
    # Its finally runs once the client is gone, not at garbage collection much later.
    wait_until(closed.exists, timeout=10, what="the generator's finally to run")


def test_sigterm_finishes_the_in_flight_request_then_exits_0(tmp_path: Path) -> None:
    wd = workdir(tmp_path, "slow", SLOW)
    gates = wd / "gates"
    with Replica(wd, "slow:Slow", {"TEST_GATES": str(gates)}) as replica:
        replica.wait_health(200)
        result: list[tuple[int, bytes]] = []
        client = threading.Thread(target=lambda: result.append(request(replica.port, timeout=20)))
        client.start()
        wait_until((gates / "started").exists, what="the request to reach __call__")

        os.kill(replica.proc.pid, signal.SIGTERM)
        wait_until(
            lambda: replica.control("GET", "/-/healthz") == (503, {"status": "draining"}),
            what="the replica to report draining",
        )
        wait_until(lambda: refuses(replica.port), what="the app port to stop accepting")
        assert replica.proc.poll() is None  # still finishing the in-flight request

        (gates / "finish").touch()
        client.join(20)
        assert result == [(200, b"finished")]
        assert replica.wait_exit() == 0


def test_an_asgi_app_gets_its_lifespan_and_no_reconfigure(tmp_path: Path) -> None:
    wd = workdir(tmp_path, "asgiapp", ASGI)
    with Replica(wd, "asgiapp:app") as replica:
        replica.wait_health(200)
        assert replica.app() == (200, b"started by lifespan")
        assert replica.control("POST", "/-/reconfigure", {"a": 1})[0] == 409
        assert replica.control("GET", "/-/info")[1]["kind"] == "asgi"
        replica.proc.send_signal(signal.SIGTERM)
        assert replica.wait_exit() == 0


def test_an_asgi_app_whose_lifespan_fails_exits_1(tmp_path: Path) -> None:
    wd = workdir(tmp_path, "asgiapp", ASGI)
    with Replica(wd, "asgiapp:failing") as replica:
        assert replica.wait_exit() == 1
        assert "RuntimeError: database unreachable" in replica.stderr
        assert "the app server on 127.0.0.1" in replica.stderr


@pytest.mark.parametrize(
    ("attr", "step", "error"),
    [
        ("BrokenInit", "BrokenInit.__init__() raised", "RuntimeError: no weights here"),
        (
            "BrokenConfig",
            "BrokenConfig.reconfigure(user_config) raised",
            "ValueError: threshold 2 is too high",
        ),
    ],
)
def test_init_or_first_reconfigure_raising_exits_1_with_a_traceback(
    tmp_path: Path, attr: str, step: str, error: str
) -> None:
    wd = workdir(tmp_path, "broken", BROKEN)
    with Replica(wd, f"broken:{attr}") as replica:
        assert replica.wait_exit() == 1
        stderr = replica.stderr
        assert step in stderr
        assert "Traceback (most recent call last)" in stderr
        assert error in stderr


def run_runner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "STEADY_CONTROL_PORT")}
    return subprocess.run(
        [sys.executable, "-m", "steadyserve.replica", *args],
        cwd=cwd,
        env={**env, "PYTHONDONTWRITEBYTECODE": "1", "PORT": "1", "STEADY_CONTROL_PORT": "1"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_import_failure_exits_1_with_one_line(tmp_path: Path) -> None:
    wd = workdir(tmp_path, "broken", BROKEN)
    done = run_runner(wd, "broken:Translatr")
    assert done.returncode == 1
    assert done.stderr == "steadyserve.replica: module 'broken' has no attribute 'Translatr'\n"
    done = run_runner(wd, "text_ml:Translator")
    assert done.returncode == 1
    assert done.stderr == (
        "steadyserve.replica: cannot import module 'text_ml' (No module named 'text_ml')\n"
    )


def test_user_config_without_reconfigure_exits_1(tmp_path: Path) -> None:
    wd = workdir(tmp_path, "broken", BROKEN)
    with Replica(wd, "broken:Described", {"STEADY_USER_CONFIG": '{"a": 1}'}) as replica:
        assert replica.wait_exit() == 1
        assert "without a reconfigure(self, user_config) method" in replica.stderr


def test_describe_prints_kind_and_options(tmp_path: Path) -> None:
    wd = workdir(tmp_path, "broken", BROKEN)
    done = run_runner(wd, "--describe", "broken:Described")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "kind": "deployment",
        "options": {"num_replicas": 3, "max_ongoing_requests": 7},
        "has_reconfigure": False,
        "has_check_health": False,
    }
    assert "module chatter on stdout" in done.stderr  # kept off the JSON


def test_describe_import_problem_exits_2_with_one_line(tmp_path: Path) -> None:
    wd = workdir(tmp_path, "broken", BROKEN)
    done = run_runner(wd, "--describe", "broken:Nope")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines()[-1] == (  # the module's own print came first
        "steadyserve.replica: module 'broken' has no attribute 'Nope'"
    )
