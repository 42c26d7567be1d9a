"""Every request gets exactly one access-log line and one count, however it ended:
completed, aborted by its client, broken off by its replica, or cut because its
replica had left the table (a drain's bound); with its bytes and time so far, and
its time to first byte. Through a real load-balancer process."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

from _lb_helpers import FakeController, LBProcess, Upstream, free_port, request, wait_for
from prometheus_client.parser import text_string_to_metric_families


def _first_event(port: int, path: str, first: bytes = b"data: first") -> socket.socket:
    """A client that has read the head and the first event of a stream at ``path``."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    received = b""
    deadline = time.monotonic() + 10
    while first not in received and time.monotonic() < deadline:
        received += s.recv(65536)
    assert first in received
    return s


def _lines(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_each_ending_of_a_request_is_one_line_with_its_outcome(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    metrics_port = free_port()
    with (
        Upstream("a") as up,
        FakeController(tmp_path) as ctl,
        LBProcess(tmp_path, "--access-log", str(log), "--metrics-port", str(metrics_port)) as lb,
    ):
        ctl.set_table([(1, up.port)])
        wait_for(lambda: ctl.polls.count(f"{ctl.epoch}:{ctl.version}") >= 1, what="table acked")
        assert request(lb.port, "GET", "/echo")[0] == 200
        with _first_event(lb.port, "/sse"):
            pass  # the client leaves mid-stream
        with _first_event(lb.port, "/halfdie", b"yyy") as broken:  # the replica breaks off
            while broken.recv(65536):
                pass
        drained = _first_event(lb.port, "/ssedie")
        ctl.set_table([])  # the replica leaves the table (draining) ...
        wait_for(lambda: ctl.polls.count(f"{ctl.epoch}:{ctl.version}") >= 1, what="table acked")
        up.gate.set()  # ... and is stopped with the stream still in flight
        drained.settimeout(10)
        while drained.recv(65536):
            pass
        drained.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as answer:
            text = answer.read().decode()
        lb.stop()
    lines = _lines(log)
    assert [(x["path"], x["outcome"], x["status"]) for x in lines] == [
        ("/echo", "completed", 200),
        ("/sse", "client_aborted", 200),
        ("/halfdie", "replica_failed", 200),
        ("/ssedie", "cut_by_drain", 200),
    ]
    for line in lines:
        assert line["replica"] == 1 and line["version"] == 1
        assert isinstance(line["bytes"], int) and line["bytes"] > 0  # what went out so far
        assert isinstance(line["ttfb_ms"], float)
        assert 0 < line["ttfb_ms"] <= line["latency_ms"]  # type: ignore[operator]
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    counted = {
        s.labels["outcome"]: s.value
        for s in parsed["steady_lb_requests"].samples
        if s.name == "steady_lb_requests_total"
    }
    assert counted == {
        "completed": 1.0,
        "client_aborted": 1.0,
        "replica_failed": 1.0,
        "cut_by_drain": 1.0,
    }


def test_a_stream_past_request_timeout_s_is_timed_out(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    with (
        Upstream("a") as up,
        FakeController(tmp_path) as ctl,
        LBProcess(tmp_path, "--access-log", str(log)) as lb,
    ):
        ctl.set_table([(1, up.port)], extra={"request_timeout_s": 0.5})
        wait_for(lambda: ctl.polls.count(f"{ctl.epoch}:{ctl.version}") >= 1, what="table acked")
        with _first_event(lb.port, "/sse") as s:  # the second event never comes in time
            s.settimeout(10)
            while s.recv(65536):
                pass
        up.gate.set()
        lb.stop()
    [line] = _lines(log)
    assert (line["outcome"], line["status"], line["replica"]) == ("timed_out", 200, 1)
    assert 500 <= line["latency_ms"] < 5000  # type: ignore[operator]
