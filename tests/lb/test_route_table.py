"""The route table, the long-poll client, the reporter, and the LB following a controller."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from _lb_helpers import FakeController, LBProcess, request, upstreams, wait_for

from steadyserve.home.paths import Home
from steadyserve.lb.route_client import LoadReporter, RouteClient
from steadyserve.wire.routes import ReplicaRoute, RouteTable

TABLE = {
    "epoch": "abc",
    "version": 3,
    "policy": "round_robin",
    "max_ongoing_requests": 5,
    "max_queued_requests": 10,
    "replicas": [{"id": 4, "version": 2, "host": "127.0.0.1", "port": 9001}],
}


def test_table_from_json() -> None:
    table = RouteTable.from_json(TABLE)
    assert table.key == "abc:3"
    assert table.replicas == (ReplicaRoute(4, 2, "127.0.0.1", 9001),)
    assert (table.policy, table.max_ongoing_requests, table.max_queued_requests) == (
        "round_robin",
        5,
        10,
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"epoch": 1}, "epoch"),
        ({"version": "3"}, "version"),
        ({"policy": "fastest"}, "policy"),
        ({"max_ongoing_requests": True}, "max_ongoing_requests"),
        ({"replicas": [{"id": 1, "version": 1, "host": "h"}]}, r"replicas\[0\].port"),
        ({"replicas": "none"}, "replicas"),
    ],
)
def test_table_errors_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RouteTable.from_json({**TABLE, **change})


def test_static_table() -> None:
    table = RouteTable.static("127.0.0.1:8001, 127.0.0.1:8002", "least_load", 7, -1)
    assert [(r.id, r.port, r.version) for r in table.replicas] == [(1, 8001, 1), (2, 8002, 1)]
    assert table.version == 1 and table.max_ongoing_requests == 7
    for bad in ("", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(ValueError, match="static-routes"):
            RouteTable.static(bad, "least_load", 1, -1)


def _run_client(home: Path, tables: list[RouteTable], until: Any, timeout: float = 10) -> None:
    """Run a RouteClient until ``until()`` holds (or fail after ``timeout`` seconds)."""

    async def main() -> None:
        client = RouteClient(Home(home), "svc", tables.append, wait_s=2.0)
        task = asyncio.create_task(client.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while not until():
                assert loop.time() < deadline, "timed out"
                await asyncio.sleep(0.02)
        finally:
            task.cancel()

    asyncio.run(main())


def test_route_client_long_polls_and_acknowledges(tmp_path: Path) -> None:
    with FakeController(tmp_path) as ctl:
        first = ctl.set_table([(1, 9001)])
        tables: list[RouteTable] = []
        changed = threading.Event()

        def until() -> bool:
            if len(tables) == 1 and not changed.is_set():
                changed.set()
                threading.Thread(target=ctl.set_table, args=([(1, 9001), (2, 9002)],)).start()
            return len(tables) == 2 and ctl.polls[-1] == tables[-1].key

        _run_client(tmp_path, tables, until)
        assert ctl.polls[0] == ""  # the first poll knows nothing
        assert tables[0].key == first
        assert first in ctl.polls  # its next poll acknowledged the first table
        assert [r.id for r in tables[1].replicas] == [1, 2]


def test_route_client_survives_failures_and_follows_a_restarted_controller(
    tmp_path: Path,
) -> None:
    tables: list[RouteTable] = []
    first = FakeController(tmp_path)
    second: FakeController | None = None
    try:
        first.set_table([(1, 9001)])
        first.fail = True

        def until() -> bool:
            nonlocal second
            if second is None and len(first.polls) >= 3:
                assert tables == []  # 500s are not tables
                first.close()  # gone; then back on another port with a new epoch
                second = FakeController(tmp_path, epoch="e2")
                second.set_table([(5, 9005)])
            return bool(tables) and tables[-1].key == f"e2:{second.version if second else 0}"

        _run_client(tmp_path, tables, until)
        assert [r.id for r in tables[-1].replicas] == [5]
    finally:
        if second is not None:
            second.close()


def test_reporter_posts_counts(tmp_path: Path) -> None:
    with FakeController(tmp_path) as ctl:
        snapshot = {"table": "e1:1", "inflight": {"1": 2}, "requests": {"1": 9}, "errors": {"1": 1}}
        reporter = LoadReporter(Home(tmp_path), "svc", lambda: snapshot, interval=0.05)
        assert asyncio.run(reporter.report_once())
        report = ctl.reports[-1]
        assert report["table"] == "e1:1"
        assert report["inflight"] == {"1": 2}
        assert report["requests"] == {"1": 9}
        assert report["errors"] == {"1": 1}
        assert isinstance(report["lb_pid"], int) and isinstance(report["time"], float)
    # No controller: failures are ignored.
    assert not asyncio.run(reporter.report_once())


def test_lb_follows_the_controller(tmp_path: Path) -> None:
    with (
        upstreams(2) as (a, b),
        FakeController(tmp_path) as ctl,
        LBProcess(tmp_path, "--report-interval", "0.1") as lb,
    ):
        key = ctl.set_table([(1, a.port)])
        wait_for(lambda: key in ctl.polls, what="table 1 acknowledged")
        assert request(lb.port, "GET", "/echo")[0] == 200
        assert len(a.requests) == 1

        # A request in flight on replica 1 when it leaves the table still finishes.
        result: list[int] = []
        t = threading.Thread(target=lambda: result.append(request(lb.port, "GET", "/hold")[0]))
        t.start()
        wait_for(lambda: len(a.requests) == 2, what="held request at replica 1")
        key = ctl.set_table([(2, b.port)])
        wait_for(lambda: key in ctl.polls, what="table 2 acknowledged")
        for _ in range(4):
            assert request(lb.port, "GET", "/echo")[0] == 200
        assert len(a.requests) == 2 and len(b.requests) == 4
        wait_for(
            lambda: (
                ctl.reports[-1]["table"] == key and ctl.reports[-1]["inflight"] == {"1": 1, "2": 0}
            ),
            what="report with leaver",
        )
        a.gate.set()
        t.join(10)
        assert result == [200]
        wait_for(lambda: ctl.reports[-1]["inflight"] == {"2": 0}, what="leaver dropped")

        # The controller goes away: the LB keeps its last table.
        ctl.close()
        for _ in range(3):
            assert request(lb.port, "GET", "/echo")[0] == 200


def test_lb_picks_up_a_restarted_controller(tmp_path: Path) -> None:
    with upstreams(2) as (a, b):
        ctl = FakeController(tmp_path)
        try:
            with LBProcess(tmp_path) as lb:
                key = ctl.set_table([(1, a.port)])
                wait_for(lambda: key in ctl.polls, what="acknowledged")
                ctl.close()
                assert request(lb.port, "GET", "/echo")[0] == 200
                ctl = FakeController(tmp_path, epoch="e2")  # new port in controller.json
                ctl.set_table([(2, b.port)])
                wait_for(lambda: any(p.startswith("e2:") for p in ctl.polls), what="new acked")
                status, _, body = request(lb.port, "GET", "/echo")
                assert status == 200 and b'"upstream": "up2"' in body
        finally:
            ctl.close()
