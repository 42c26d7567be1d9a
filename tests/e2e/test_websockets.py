"""WebSockets through the load balancer, with the ``websockets`` library as the client.

Echo through the endpoint; many sockets at once spread over the replicas and
counted in the metrics; a rolling update while sockets are open: no handshake
fails, new sockets reach the new version, old ones get 1001 "going away" from the
load balancer once ``websocket_drain_s`` has passed.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from steadyserve.home.paths import Home
from tests.e2e.test_updates import port_of, write
from tests.helpers.figures import report
from tests.helpers.steady import Steady, http_get

APPS = Path(__file__).resolve().parent / "apps"
STEP_S = 10.0  # bound on any one network step of these tests


FROM_ZERO = """replica_policy:
            min_replicas: 0
            max_replicas: 1
            target_ongoing_requests: 10
            downscale_to_zero_delay_s: 600
          cold_start_timeout_s: 60"""


def ws_spec(
    message: str = "v1",
    replicas: int = 2,
    drain_s: float = 1.0,
    scaling: str | None = None,
    workers: int = 1,
) -> str:
    return textwrap.dedent(f"""\
        name: ws
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 10
            timeout_seconds: 2
          {scaling or f"replicas: {replicas}"}
          update_deadline_s: 60
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 15
          websocket_drain_s: {drain_s}
          load_balancer:
            workers: {workers}
        workdir: {APPS}
        envs:
          MESSAGE: {message}
        run: {sys.executable} ws_echo.py
        """)


def up(steady: Steady, tmp: Path, **kw: object) -> int:
    steady.run("up", str(write(tmp, ws_spec(**kw), "v1.yaml")), "--wait", "--timeout", "60")  # type: ignore[arg-type]
    return port_of(steady.service("ws"))


async def open_socket(port: int, timeout: float = STEP_S) -> ClientConnection:
    return await asyncio.wait_for(
        connect(f"ws://127.0.0.1:{port}/chat", compression=None, proxy=None, open_timeout=timeout),
        timeout,
    )


async def echo(ws: ClientConnection, text: str) -> str:
    await asyncio.wait_for(ws.send(text), STEP_S)
    answer = await asyncio.wait_for(ws.recv(), STEP_S)
    assert isinstance(answer, str) and answer.endswith(f" {text}"), answer
    return answer


def lb_metrics(steady: Steady) -> str:
    url = Home.from_env(steady.home).controller_url()
    assert url is not None
    with urllib.request.urlopen(f"{url}/metrics", timeout=STEP_S) as resp:
        return str(resp.read().decode())


@pytest.mark.parametrize("workers", [1, 2])
def test_echo_through_the_endpoint(steady: Steady, tmp_path: Path, workers: int) -> None:
    port = up(steady, tmp_path, replicas=1, workers=workers)

    async def scenario() -> None:
        ws = await open_socket(port)
        version, _replica, _ = (await echo(ws, "hello")).split(" ", 2)
        assert version == "1"
        for i in range(20):
            await echo(ws, f"message {i} " + "x" * (i * 1000))  # frames of many sizes
        await ws.close()

    asyncio.run(scenario())
    status, _ = http_get(port, "/health")  # plain HTTP on the same endpoint still works
    assert status == 200


def test_many_concurrent_sockets_spread_and_are_counted(steady: Steady, tmp_path: Path) -> None:
    port = up(steady, tmp_path)
    sockets = 40

    async def scenario() -> tuple[Counter[str], str]:
        opened = await asyncio.gather(*(open_socket(port) for _ in range(sockets)))
        replicas: Counter[str] = Counter()
        for round_ in range(3):
            answers = await asyncio.gather(
                *(echo(ws, f"{i}-{round_}") for i, ws in enumerate(opened))
            )
            if round_ == 0:
                replicas.update(a.split(" ")[1] for a in answers)
        # Each socket holds a replica slot for its whole life: least-load splits them.
        await asyncio.sleep(1.0)  # a load report or two reaches the controller
        metrics = await asyncio.to_thread(lb_metrics, steady)
        await asyncio.gather(*(ws.close() for ws in opened))
        return replicas, metrics

    replicas, metrics = asyncio.run(scenario())
    report(f"{sockets} concurrent WebSockets over 2 replicas: {dict(replicas)}")
    assert sum(replicas.values()) == sockets
    assert sorted(replicas.values()) == [sockets // 2, sockets // 2]
    open_lines = [
        line for line in metrics.splitlines() if line.startswith("steady_lb_websockets_open{")
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in open_lines) == sockets, open_lines
    assert "steady_lb_websockets_total{" in metrics


def test_rolling_update_with_open_sockets(steady: Steady, tmp_path: Path) -> None:
    port = up(steady, tmp_path)
    v2 = write(tmp_path, ws_spec(message="v2"), "v2.yaml")

    async def scenario() -> tuple[list[int | None], Counter[str], int]:
        old = await asyncio.gather(*(open_socket(port) for _ in range(10)))
        for ws in old:
            assert (await echo(ws, "before")).startswith("1 ")
        update = asyncio.create_task(
            asyncio.to_thread(steady.run, "update", "ws", str(v2), "--wait", "--timeout", "60")
        )
        versions: Counter[str] = Counter()
        handshakes_failed = 0
        close_codes: list[int | None] = [None] * len(old)
        live = set(range(len(old)))
        for _ in range(400):  # bounded: until the update is done and old sockets are closed
            if update.done() and not live:
                break
            try:  # a new socket during the update: its handshake must never fail
                ws = await open_socket(port)
                versions[(await echo(ws, "new")).split(" ")[0]] += 1
                await ws.close()
            except (OSError, ConnectionClosed, asyncio.TimeoutError):
                handshakes_failed += 1
            for i in list(live):  # old sockets keep working until they get 1001
                try:
                    await echo(old[i], "still there?")
                except ConnectionClosed as exc:
                    close_codes[i] = exc.rcvd.code if exc.rcvd is not None else None
                    live.discard(i)
            await asyncio.sleep(0.05)
        await update
        after = await open_socket(port)
        versions["after:" + (await echo(after, "after")).split(" ")[0]] += 1
        await after.close()
        return close_codes, versions, handshakes_failed

    close_codes, versions, failed = asyncio.run(scenario())
    report(
        f"WebSockets through a rolling update: new sockets by version {dict(versions)}, "
        f"old sockets closed with {Counter(close_codes)}, failed handshakes {failed}"
    )
    assert failed == 0
    assert close_codes == [1001] * len(close_codes)
    assert versions["after:2"] == 1


def test_a_handshake_at_zero_replicas_wakes_the_service(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(write(tmp_path, ws_spec(scaling=FROM_ZERO), "v1.yaml")))
    svc = steady.wait_for(
        "ws", lambda s: s["target_replicas"] == 0 and s["total_replicas"] == 0, what="zero"
    )

    async def scenario() -> str:
        ws = await open_socket(port_of(svc), timeout=60)  # held while a replica starts
        answer = await echo(ws, "woken")
        await ws.close()
        return answer

    assert asyncio.run(scenario()).startswith("1 ")
    assert steady.service("ws")["target_replicas"] == 1
