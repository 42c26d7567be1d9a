"""service.load_balancer limits change in place: the running LB applies them, no
replica and no load balancer restarts."""

from __future__ import annotations

import socket
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.helpers.steady import EXAMPLES, Steady


def service_file(tmp: Path, name: str, header_timeout: float) -> Path:
    path = tmp / name
    path.write_text(
        textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe: /health
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
          load_balancer:
            header_timeout_s: {header_timeout}
        workdir: {EXAMPLES / "http_server"}
        envs:
          MESSAGE: hi
        run: python3 server.py
        """)
    )
    return path


def answer_to_slowloris(port: int, timeout: float) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHo")
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                piece = s.recv(4096)
            except TimeoutError:
                break
            if not piece:
                break
            data += piece
        return data


def fleet(svc: dict[str, Any]) -> tuple[Any, list[int]]:
    pids = sorted(r["pid"] for r in svc["replicas"] if r["status"] == "READY")
    return svc["load_balancer_pid"], pids


def test_header_timeout_changes_in_place(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(service_file(tmp_path, "v1.yaml", 60)), "--wait", "--timeout", "60")
    before = steady.service("web")
    port = int(str(before["endpoint"]).rsplit(":", 1)[1])
    assert answer_to_slowloris(port, 1.0) == b""  # 60 s: still waiting after 1 s
    out = steady.run(
        "update", "web", str(service_file(tmp_path, "v2.yaml", 0.3)), "--wait", "--timeout", "60"
    ).stdout
    assert "service.load_balancer" in out and "in place" in out
    answer = b""
    for _ in range(10):  # the LB picks the table up on its next long poll
        answer = answer_to_slowloris(port, 2.0)
        if answer:
            break
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert fleet(steady.service("web")) == fleet(before)
