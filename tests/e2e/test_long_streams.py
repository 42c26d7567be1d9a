"""Token streams through the endpoint survive a rolling update, a blue-green switch
and a scale-down: every chunk arrives, and each stream has its one access-log line.

The streams here last ``STREAM_S`` seconds and the service's
``graceful_shutdown_timeout_s`` is 1 s, so the old fixed grace period would cut
every one of them (a draining replica was stopped after it); everything else is
the default, ``drain_timeout_s`` (10 minutes) included. A 60 s stream takes too
long for the suite: bench/long_streams.py measures that case (bench/RESULTS.md).
"""

from __future__ import annotations

import http.client
import json
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from tests.helpers.steady import EXAMPLES, Steady

SERVER = EXAMPLES / "http_server"
TOKENS = 30
INTERVAL_S = 0.1  # STREAM_S = 3 s: three times the grace period
STREAM_S = TOKENS * INTERVAL_S


def spec_text(replicas: int, message: str) -> str:
    return textwrap.dedent(f"""\
        name: chat
        service:
          readiness_probe: /health
          replicas: {replicas}
          graceful_shutdown_timeout_s: 1
          access_log: true
        workdir: {SERVER}
        envs:
          MESSAGE: {message}
        run: python3 server.py
        """)


class Stream(threading.Thread):
    """One client reading a whole token stream; what it got, and from which replica."""

    def __init__(self, port: int, label: str) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.path = f"/stream?n={TOKENS}&interval={INTERVAL_S}&{label}"
        self.started = threading.Event()
        self.tokens: list[str] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.request("GET", self.path)
            response = conn.getresponse()
            while True:
                line = response.readline()
                if not line:
                    break
                if line.startswith(b"data: "):
                    self.tokens.append(line.decode().strip())
                    self.started.set()
            conn.close()
        except (OSError, http.client.HTTPException) as exc:
            self.error = repr(exc)
        finally:
            self.started.set()

    @property
    def replica(self) -> int:
        return int(self.tokens[0].rsplit("replica-", 1)[1])

    def whole(self) -> bool:
        want = [f"token-{i}" for i in range(TOKENS)]
        return self.error is None and [t.split()[1] for t in self.tokens] == want


def streams(port: int, count: int, label: str) -> list[Stream]:
    out = [Stream(port, f"{label}{i}") for i in range(count)]
    for s in out:
        s.start()
    for s in out:
        assert s.started.wait(20) and s.tokens, s.error
    return out


def finished(running: list[Stream]) -> None:
    for s in running:
        s.join(STREAM_S + 30)
    cut = [(s.path, len(s.tokens), s.error) for s in running if not s.whole()]
    assert not cut, f"streams cut: {cut}"


def update(steady: Steady, tmp: Path, text: str, *mode: str) -> str:
    path = tmp / f"spec-{time.monotonic_ns()}.yaml"
    path.write_text(text)
    return steady.run("update", "chat", str(path), *mode, "--wait", "--timeout", "60").stdout


def test_streams_outlive_updates_and_scale_down(steady: Steady, tmp_path: Path) -> None:
    first = tmp_path / "v1.yaml"
    first.write_text(spec_text(2, "v1"))
    steady.run("up", str(first), "--wait", "--timeout", "60")
    port = int(str(steady.service("chat")["endpoint"]).rsplit(":", 1)[1])

    # A rolling update with a stream on each old replica: SUCCEEDED comes first ...
    rolling = streams(port, 2, "rolling")
    out = update(steady, tmp_path, spec_text(2, "v2"))
    assert "SUCCEEDED" in out
    assert "(version 1) draining: 1 request(s) in flight" in out  # update --wait says so
    svc = steady.service("chat")
    draining = [r for r in svc["replicas"] if r["draining"]]
    assert draining and all(r["version"] == 1 for r in draining), svc["replicas"]
    assert sum(r["draining"]["in_flight"] for r in draining) >= 1
    # ... then every chunk, long after graceful_shutdown_timeout_s.
    finished(rolling)
    steady.wait_for("chat", lambda s: {r["version"] for r in s["replicas"]} == {2}, what="v1 gone")

    # A blue-green switch.
    blue_green = streams(port, 2, "bluegreen")
    update(steady, tmp_path, spec_text(2, "v3"), "--mode", "blue_green")
    finished(blue_green)
    steady.wait_for("chat", lambda s: {r["version"] for r in s["replicas"]} == {3}, what="v2 gone")

    # Scale-down: 3 replicas, streams on two of them; the idle one goes first.
    update(steady, tmp_path, spec_text(3, "v3"))
    steady.wait_for("chat", lambda s: s["ready_replicas"] == 3, what="3 ready")
    scaled = streams(port, 2, "scaledown")
    busy = {s.replica for s in scaled}
    assert len(busy) == 2, "least_load spreads two streams over two replicas"
    # The victim is chosen by the load the LB last reported: wait for that report.
    steady.wait_for(
        "chat",
        lambda s: {r["id"] for r in s["replicas"] if r["in_flight"]} == busy,
        what="the streams in the controller's view",
    )
    update(steady, tmp_path, spec_text(2, "v3"))
    svc = steady.wait_for("chat", lambda s: s["total_replicas"] == 2, what="one replica gone")
    assert {r["id"] for r in svc["replicas"]} == busy  # the idle one was stopped
    # Down to one: a replica with a stream drains, and its stream still ends whole.
    update(steady, tmp_path, spec_text(1, "v3"))
    finished(scaled)

    steady.wait_for("chat", lambda s: s["total_replicas"] == 1, what="one replica left")
    log = Path(steady.home) / "services" / "chat" / "access.log"
    lines = _access_lines(log, 6)
    for line in lines:
        assert line["outcome"] == "completed" and line["status"] == 200, line
        assert line["latency_ms"] >= STREAM_S * 1000 * 0.9
        assert 0 < line["ttfb_ms"] < line["latency_ms"]


def _access_lines(log: Path, count: int) -> list[dict[str, Any]]:
    """The log's stream lines, once all ``count`` are written (at least once a second)."""
    deadline = time.monotonic() + 10
    lines: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        if log.exists():
            lines = [json.loads(x) for x in log.read_text().splitlines()]
            lines = [x for x in lines if str(x["path"]).startswith("/stream")]
            if len(lines) >= count:
                break
        time.sleep(0.2)
    assert len(lines) == count, lines
    return lines
