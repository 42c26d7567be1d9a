"""Handles against real replicas (addresses given by STEADY_GRAPH_ROUTES): a replica
that refuses the connection is skipped, not failed; a sync method, and an
argument that is itself a pending response."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.replica._proc import HOST, Replica

from steadyserve.serve import DeploymentHandle
from steadyserve.serve import handle as handle_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "text_ml"
SECRET = {"STEADY_GRAPH_SECRET": "test-graph-secret"}
"""A replica takes handle calls only with its home's graph secret."""


@pytest.fixture(autouse=True)
def graph_secret() -> Iterator[None]:
    """This process's handles carry the secret the test replicas were given."""
    before = handle_module._graph_secret
    handle_module.set_graph_secret(SECRET["STEADY_GRAPH_SECRET"])
    yield
    handle_module.set_graph_secret(before)


def _closed_port() -> int:
    """A port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_refused_replica_is_skipped_and_responses_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Replica(EXAMPLE, "text_ml:app.Translator", SECRET, log_dir=tmp_path) as replica:
        replica.wait_health(200)
        dead = [f"{HOST}:{_closed_port()}" for _ in range(3)]
        addresses = ",".join([*dead, f"{HOST}:{replica.port}"])
        monkeypatch.setenv("STEADY_GRAPH_ROUTES", json.dumps({"retry-test": addresses}))
        handle = DeploymentHandle("Translator", service="retry-test")

        async def calls() -> list[str]:
            return list(
                await asyncio.gather(*(handle.translate.remote("my dog") for _ in range(8)))
            )

        assert asyncio.run(calls()) == ["mon chien"] * 8
        # A pending response as an argument is resolved first, as in Ray.
        first = handle.translate.remote("good")
        assert handle.translate.remote(first).result(timeout_s=30) == "bon"


def test_blocking_on_a_response_inside_an_event_loop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEADY_GRAPH_ROUTES", json.dumps({"loop-test": f"{HOST}:{_closed_port()}"}))
    handle = DeploymentHandle("X", service="loop-test")

    async def inside() -> None:
        response = handle.remote()
        try:
            with pytest.raises(RuntimeError, match="use `await response` instead"):
                response.result(timeout_s=1)
        finally:
            response.cancel()

    asyncio.run(inside())


ENDLESS = """
import itertools, threading, time

from steadyserve import serve

@serve.deployment
class Endless:
    def __init__(self):
        self.closed = 0
        self.lock = threading.Lock()

    async def ticks(self):
        try:
            for i in itertools.count():
                yield i
        finally:
            self.closed += 1

    def sync_ticks(self):
        try:
            for i in itertools.count():
                time.sleep(0.001)
                yield i
        finally:
            with self.lock:
                self.closed += 1

    def closed_count(self):
        return self.closed

app = Endless.bind()
"""


def test_a_cancelled_stream_closes_the_callees_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "endless.py").write_text(ENDLESS)
    with Replica(tmp_path, "endless:app", SECRET, log_dir=tmp_path) as replica:
        replica.wait_health(200)
        monkeypatch.setenv("STEADY_GRAPH_ROUTES", json.dumps({"endless": f"{HOST}:{replica.port}"}))
        handle = DeploymentHandle("Endless", service="endless")
        for method in ("ticks", "sync_ticks"):
            stream = handle.options(stream=True, method_name=method).remote()
            assert [next(stream) for _ in range(3)] == [0, 1, 2]
            stream.cancel()
        closed = 0
        for _ in range(100):  # bounded: 100 x 0.05 s
            closed = handle.closed_count.remote().result(timeout_s=10)
            if closed == 2:
                break
            time.sleep(0.05)
        assert closed == 2
