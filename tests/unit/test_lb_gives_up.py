"""A load balancer that cannot start is not restarted forever: after 3 exits
within 10 s the service is FAILED with the LB log's last line as the reason."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from steadyserve.controller.lb_process import LoadBalancerProcess
from steadyserve.core.planner import service_status
from steadyserve.core.states import EventKind, ServiceStatus
from steadyserve.home.paths import Home


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Exited:
    """A handle whose process has already exited (as an LB with a bad key does)."""

    pid = 4242
    create_time = 1.0

    def exit_code(self) -> int:
        return 1


class Store:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def add_event(self, *args: Any) -> None:
        self.events.append(args)

    def set_service_fields(self, *args: Any, **kwargs: Any) -> None:
        pass


class Row:
    lb_pid: int | None = None
    lb_create_time: float | None = None


class NeverStarts(LoadBalancerProcess):
    starts = 0

    def start(self, listeners: list[socket.socket], workers: int = 1) -> None:
        self.starts += 1
        self._last_start = time.monotonic()
        self.handle = Exited()  # type: ignore[assignment]

    def _listen(self, count: int) -> list[socket.socket]:
        return []


def _lb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[NeverStarts, Clock]:
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    home = Home(tmp_path)
    log = home.lb_log("web")
    log.parent.mkdir(parents=True)
    log.write_text("Traceback ...\nssl.SSLError: [X509: KEY_VALUES_MISMATCH] key values mismatch\n")
    return NeverStarts(home, "web", 30001), clock


def test_three_exits_within_ten_seconds_stop_the_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lb, clock = _lb(tmp_path, monkeypatch)
    store = Store()
    for _ in range(20):  # 10 s of supervision ticks, 0.5 s apart
        lb.supervise(store, Row())  # type: ignore[arg-type]
        clock.now += 0.5
    assert lb.starts == 3
    assert lb.failure == (
        "load balancer exited 3 times within 10s (last exit code 1): ssl.SSLError:"
        " [X509: KEY_VALUES_MISMATCH] key values mismatch"
    )
    assert store.events[-1][2:] == (EventKind.LB_RUNNING, EventKind.LB_FAILED, lb.failure)


def test_exits_far_apart_are_restarted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lb, clock = _lb(tmp_path, monkeypatch)
    for _ in range(6):  # an exit every 6 s: never 3 within 10 s
        lb.supervise(Store(), Row())  # type: ignore[arg-type]
        clock.now += 6.0
    assert lb.starts == 6 and lb.failure is None


def test_a_service_whose_lb_failed_is_failed() -> None:
    common: dict[str, Any] = dict(
        shutting_down=False, target=1, replicas=[], routable=frozenset(), version_broken=False
    )
    assert service_status(lb_ready=False, **common) is ServiceStatus.CONTROLLER_INIT
    assert service_status(lb_ready=False, lb_failed=True, **common) is ServiceStatus.FAILED
