"""Handles against real replicas (addresses given by STEADY_GRAPH_ROUTES): a replica
that refuses the connection is skipped, not failed; a sync method, and an
argument that is itself a pending response."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
from tests.replica._proc import HOST, Replica

from steadyserve.serve import DeploymentHandle

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "text_ml"


def _closed_port() -> int:
    """A port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_refused_replica_is_skipped_and_responses_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Replica(EXAMPLE, "text_ml:app.Translator", {}, log_dir=tmp_path) as replica:
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
