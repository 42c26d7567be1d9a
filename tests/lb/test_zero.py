"""Scale to zero in the load balancer: requests held while the table lists no replica."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

from _lb_helpers import FakeController, LBProcess, Upstream, request, wait_for


def test_held_request_asks_for_a_replica_and_is_answered_by_the_first_one(
    tmp_path: Path,
) -> None:
    with (
        FakeController(tmp_path) as ctl,
        LBProcess(tmp_path, "--report-interval", "0.1") as lb,
        Upstream("first") as up,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        key = ctl.set_table([], max_queued=1, extra={"hold_at_zero_s": 30})
        wait_for(lambda: ctl.polls[-1:] == [key], what="LB acknowledged the table")
        held = pool.submit(request, lb.port, "GET", "/echo", timeout=30)
        wait_for(lambda: ctl.wakes >= 1, what="the LB asked for a replica")
        wait_for(
            lambda: any(r.get("queued") == 1 for r in ctl.reports), what="queue length reported"
        )
        # Beyond max_queued_requests: 503 at once, with why.
        status, _, body = request(lb.port, "GET", "/echo")
        assert status == 503 and b"starting from zero, queue full" in body
        assert not held.done()
        ctl.set_table([(1, up.port)], max_queued=1, extra={"hold_at_zero_s": 30})
        status, _, body = held.result(timeout=10)
        assert status == 200 and len(up.requests) == 1


def test_held_request_gets_503_after_the_hold_time(tmp_path: Path) -> None:
    with FakeController(tmp_path) as ctl, LBProcess(tmp_path) as lb:
        key = ctl.set_table([], extra={"hold_at_zero_s": 0.5})
        wait_for(lambda: ctl.polls[-1:] == [key], what="LB acknowledged the table")
        status, _, body = request(lb.port, "GET", "/", timeout=10)
        assert status == 503
        assert body.decode().strip() == (
            "service 'svc' has no ready replica: it was scaled to zero and none became"
            " ready within cold_start_timeout_s=0.5"
        )
        assert ctl.wakes >= 1


def test_without_hold_no_replica_is_still_503_at_once(tmp_path: Path) -> None:
    with FakeController(tmp_path) as ctl, LBProcess(tmp_path) as lb:
        key = ctl.set_table([], extra={"hold_at_zero_s": 0})
        wait_for(lambda: ctl.polls[-1:] == [key], what="LB acknowledged the table")
        t0 = time.monotonic()
        status, _, body = request(lb.port, "GET", "/")
        assert (
            status == 503
            and body.decode().strip() == "no ready replica for service 'svc': it is unavailable"
        )
        assert time.monotonic() - t0 < 5 and ctl.wakes == 0
