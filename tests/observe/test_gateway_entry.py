"""Traffic through the gateway next to the endpoint's: the controller keeps each
entry's counters apart for ``/metrics`` (the ``entry`` label) and adds them up for
the dashboard and canary analysis; both processes share the service's request log."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from steadyserve.controller.metrics import Traffic
from steadyserve.lb.access_log import AccessLog
from steadyserve.wire.counts import LATENCY_BUCKETS
from steadyserve.wire.exposition import families
from steadyserve.wire.routes import Limits


def _counts(version: str, requests: int, entry: str | None = None) -> dict[str, object]:
    slots = [0.0] * (len(LATENCY_BUCKETS) + 2)
    slots[1] = float(requests)
    counts: dict[str, object] = {
        "requests": {f"{version} 1 GET 2": requests},
        "latency": {version: slots},
        "bytes_out": 10 * requests,
        "inflight_total": 1,
    }
    if entry is not None:
        counts["entry"] = entry
    return counts


def test_each_entry_is_its_own_series_and_the_rates_add_both_up() -> None:
    traffic = Traffic()
    traffic.ingest(10, _counts("1", 0), now=100.0)
    traffic.ingest(20, _counts("1", 0, "gateway"), now=100.2, entry="gateway")
    traffic.ingest(10, _counts("1", 40), now=101.0)
    traffic.ingest(20, _counts("1", 60, "gateway"), now=101.1, entry="gateway")
    # The gateway restarted: its counters start again from zero, the series does not.
    traffic.ingest(21, _counts("1", 5, "gateway"), now=101.6, entry="gateway")
    traffic.ingest(10, _counts("1", 50), now=102.1)

    assert traffic.counts()["requests"] == {"1 1 GET 2": 50 + 65}
    # A sample a second: 40 by 101.0 (the endpoint's), then 10 + 65 over 1.1 s.
    assert traffic.timeseries()["versions"]["1"]["rps"] == [40.0, round(75 / 1.1, 3)]
    # steady_lb_up is about the service's own load balancer only.
    assert traffic.received_at == 102.1

    by_entry = {
        (s.labels["entry"], s.labels["version"]): s.value
        for family in families(("web", c) for c in traffic.by_entry())
        if family.name == "steady_lb_requests"
        for s in family.samples
    }
    assert by_entry == {("endpoint", "1"): 50.0, ("gateway", "1"): 65.0}
    sent = {
        s.labels["entry"]: s.value
        for family in families(("web", c) for c in traffic.by_entry())
        if family.name == "steady_lb_sent_bytes"
        for s in family.samples
    }
    assert sent == {"endpoint": 500.0, "gateway": 650.0}


def test_a_report_without_an_entry_is_the_endpoints() -> None:
    [requests, *_] = families([("web", _counts("2", 3))])
    assert [(s.labels["entry"], s.value) for s in requests.samples] == [("endpoint", 3.0)]


class _Ex:
    """What the access log reads of an exchange (lb/exchange.py)."""

    head = b"GET /x HTTP/1.1\r\n\r\n"
    status = 200
    outcome = "completed"
    request_id = b"test-1"
    attempts = 1
    client = SimpleNamespace(
        head=SimpleNamespace(xff=b"127.0.0.1"), proxy=SimpleNamespace(limits=Limits())
    )


def test_the_gateway_and_the_load_balancer_share_the_log_and_its_rotation(
    tmp_path: Path,
) -> None:
    """Two writers of one file: neither writes on into a file the other rotated
    away, so every file stays within max_bytes and no line is lost or torn."""
    path = tmp_path / "access.log"
    # Lines are ~270 bytes: 60 of them fill 4-5 files of 4000 bytes, none dropped.
    endpoint = AccessLog(path, max_bytes=4000, backups=5)
    gateway = AccessLog(path, max_bytes=4000, backups=5, entry="gateway")
    for _ in range(30):
        for log in (endpoint, gateway):
            log.request(_Ex(), 1, 1, 0.001, 10, 0.0005)  # type: ignore[arg-type]
            log.flush()
    endpoint.close()
    gateway.close()
    files = sorted(tmp_path.iterdir())
    assert 4 <= len(files) <= 6  # ~16 KB of lines in files of at most 4000 bytes
    assert all(p.stat().st_size <= 4000 for p in files), [p.stat().st_size for p in files]
    lines = [json.loads(x) for p in files for x in p.read_text().splitlines()]
    assert len(lines) == 60
    assert sorted(x["entry"] for x in lines) == ["endpoint"] * 30 + ["gateway"] * 30
