"""Every table, rendered at 80 and 200 columns with long values: no column is
dropped, every header is whole, and every long value is there in full."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from steadyserve.cli.tables import (
    CHANGE_COLUMNS,
    EVENT_COLUMNS,
    HISTORY_COLUMNS,
    REPLICA_COLUMNS,
    SERVICE_COLUMNS,
    Clock,
    changes_table,
    events_table,
    fit,
    history_table,
    replicas_table,
    services_table,
    update_notes,
)

NOW = 1_796_074_985.0  # 2026-11-30T21:43:05Z
LONG = "readiness probe failed: " + " ".join(f"word{i}" for i in range(60))
LONG_PATH = "service.readiness_probe.post_data." + "nested_key_" * 8


def service(**extra: Any) -> dict[str, Any]:
    return {
        "name": "a-service-with-a-rather-long-name",
        "active_versions": [1, 2],
        "version": 2,
        "uptime_s": 3725.0,
        "status": "READY",
        "ready_replicas": 2,
        "total_replicas": 2,
        "endpoint": "127.0.0.1:30001",
        "replicas": [
            {
                "id": 1,
                "version": 1,
                "ip": "127.0.0.1",
                "launched_at": NOW - 30,
                "resources": "1x Local(cpus=2, memory=4, accelerators=" + "A100:8," * 6 + ")",
                "status": "READY",
                "region": "local",
            }
        ],
        **extra,
    }


TABLES: dict[str, tuple[tuple[str, ...], Callable[[], Table], list[tuple[str, str]]]] = {
    "services": (
        SERVICE_COLUMNS,
        lambda: services_table([service()]),
        [("NAME", "a-service-with-a-rather-long-name"), ("ENDPOINT", "127.0.0.1:30001")],
    ),
    "replicas": (
        REPLICA_COLUMNS,
        lambda: replicas_table([service()]),
        [("RESOURCES", "A100:8," * 6), ("SERVICE_NAME", "a-service-with-a-rather-long-name")],
    ),
    "events": (
        EVENT_COLUMNS,
        lambda: events_table(
            [
                {
                    "time": NOW,
                    "replica_id": 12,
                    "from_status": "STARTING",
                    "to_status": "FAILED_INITIAL_DELAY",
                    "reason": LONG,
                }
            ],
            Clock(utc=True, now=NOW),
        ),
        [("WHY", LONG), ("TO", "FAILED_INITIAL_DELAY"), ("TIME", "21:43:05Z")],
    ),
    "history": (
        HISTORY_COLUMNS,
        lambda: history_table(
            [
                {
                    "version": 3,
                    "created_at": NOW - 86400 * 3,
                    "mode": "blue_green",
                    "outcome": "rolled_back",
                    "changes": LONG,
                }
            ],
            Clock(now=NOW),
        ),
        [("CHANGES", LONG), ("OUTCOME", "rolled_back")],
    ),
    "changes": (
        CHANGE_COLUMNS,
        lambda: changes_table(
            [
                {
                    "path": LONG_PATH,
                    "kind": "restart",
                    "old": {"path": "/health", "initial_delay_seconds": 10, "note": LONG},
                    "new": {"path": "/ready", "initial_delay_seconds": 10, "note": LONG},
                },
                {"path": "run", "kind": "restart", "old": LONG, "new": LONG + " --flag"},
            ]
        ),
        [
            ("FIELD", LONG_PATH),
            ("OLD", '- path: "/health"'),
            ("NEW", '+ path: "/ready"'),
            ("NEW", LONG + " --flag"),
        ],
    ),
}


def render(table: Table, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text()


def squeeze(text: str) -> str:
    return "".join(text.split())


def column_text(text: str, columns: tuple[str, ...], column: str) -> str:
    """What one column shows, its folded lines joined (sliced by header offsets)."""
    lines = text.splitlines()
    starts = [lines[0].index(name) for name in columns]
    index = columns.index(column)
    end = starts[index + 1] if index + 1 < len(columns) else None
    return "".join(line[starts[index] : end] for line in lines[1:])


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("name", list(TABLES))
def test_every_header_whole_and_every_value_in_full(name: str, width: int) -> None:
    columns, build, values = TABLES[name]
    text = render(build(), width)
    lines = text.splitlines()
    assert lines[0].split() == list(columns), text
    assert all(len(line) <= width for line in lines), text
    for column, value in values:
        assert squeeze(value) in squeeze(column_text(text, columns, column)), (value, text)


def test_structured_values_show_as_a_diff() -> None:
    text = render(TABLES["changes"][1](), 200)
    assert '- path: "/health"' in text and '+ path: "/ready"' in text
    assert "  initial_delay_seconds: 10" in text  # unchanged keys are shown, unmarked
    assert "..." not in text


@pytest.fixture
def tokyo() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_times_are_iso_with_zone_and_date_unless_today(tokyo: None) -> None:
    assert Clock(utc=True, now=NOW).format(NOW - 5) == "21:43:00Z"
    assert Clock(utc=True, now=NOW).format(NOW - 86400) == "2026-11-29T21:43:05Z"
    # 21:43 UTC is 06:43 the next day in Tokyo: a different day there, so dated.
    assert Clock(now=NOW - 86400).format(NOW) == "2026-12-01T06:43:05+09:00"
    assert Clock(now=NOW).format(NOW) == "06:43:05+09:00"


def test_failed_update_is_noted_until_the_next_update() -> None:
    failed = {
        "from_version": 1,
        "to_version": 2,
        "status": "FAILED",
        "message": "version 2 broken: replica 3 exited with code 1; rolled back",
    }
    assert update_notes([service(update=failed)]) == [
        "a-service-with-a-rather-long-name: update to version 2 FAILED: "
        "version 2 broken: replica 3 exited with code 1; rolled back"
    ]
    assert update_notes([service(update={**failed, "status": "SUCCEEDED"})]) == []
    assert update_notes([service(update=None)]) == []


@pytest.mark.parametrize("width", [80, 100])
def test_a_column_never_folds_inside_a_word(width: int) -> None:
    """State names and other words stay whole at 80 columns (they folded as
    ``SHUTTING_DO`` / ``WN``): cells wrap between words, and columns move closer
    when two spaces apart would cut one."""
    svc = service(name="http-server", status="SHUTTING_DOWN")
    svc["replicas"][0].update(status="SHUTTING_DOWN", resources="1x Local(cpus=2, memory=4)")
    tables = {
        "SHUTTING_DOWN http-server 127.0.0.1:30001 ENDPOINT": services_table([svc]),
        "SHUTTING_DOWN http-server 127.0.0.1 REGION local STATUS": replicas_table([svc]),
    }
    for wanted, table in tables.items():
        console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
        console.print(fit(table, console))
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width, text
        for whole in wanted.split():
            assert whole in text.split(), f"{whole} cut at {width} columns:\n{text}"


def test_a_pool_shows_no_endpoint() -> None:
    """A pool's row keeps a port number, but nothing listens there (docs/pools.md)."""
    pool = service(name="batch", pool={"policy": {"workers": 2}, "pending_jobs": 0, "jobs": {}})
    text = render(services_table([service(), pool]), 200)
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:]}
    assert rows["batch"][-1] == "-"
    assert rows["a-service-with-a-rather-long-name"][-1] == "127.0.0.1:30001"


def test_draining_replicas_are_listed_with_what_they_still_carry() -> None:
    from steadyserve.cli.common import draining_lines

    svc = {
        "name": "chat",
        "replicas": [
            {"id": 1, "version": 1, "draining": {"in_flight": 3, "waited_s": 41.6, "limit_s": 600}},
            {"id": 2, "version": 2, "draining": None},
        ],
    }
    assert draining_lines(svc) == [
        "chat: replica 1 (version 1) draining: 3 request(s) in flight, waited 42s"
        " of drain_timeout_s 600"
    ]
    assert draining_lines({"name": "chat", "replicas": [{"id": 2, "version": 2}]}) == []
