"""The load balancer's metrics: names, labels and values, read back with
prometheus_client's parser; the pieces the dashboard computes from them; the
request log's format and rotation; the service.access_log field."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from steadyserve.controller.metrics import Traffic, quantile
from steadyserve.lb.access_log import AccessLog
from steadyserve.spec import ServiceSpec, SpecError, load_service_file
from steadyserve.spec.changes import classify
from steadyserve.wire.counts import LATENCY_BUCKETS, TTFB_BUCKETS, merge_counts
from steadyserve.wire.exposition import families
from steadyserve.wire.routes import Limits
from tests.observe._observe import get

sys.path.insert(0, str(Path(__file__).parents[1] / "lb"))
from _lb_helpers import LBProcess, Upstream, request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_lb_metrics_port_shows_requests_by_version_replica_method_and_class(
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    log = tmp_path / "access.log"
    with (
        Upstream("a") as up,
        LBProcess(
            tmp_path,
            "--static-routes",
            up.address,
            "--metrics-port",
            str(metrics_port),
            "--access-log",
            str(log),
        ) as lb,
    ):
        for _ in range(3):
            assert request(lb.port, "GET", "/echo")[0] == 200
        assert request(lb.port, "POST", "/echo", body=b"x" * 100)[0] == 200
        assert request(lb.port, "GET", "/status/503")[0] == 503
        # The service's own /metrics is the replica's, never the LB's.
        status, _, body = request(lb.port, "GET", "/metrics")
        assert b"steady_lb" not in body
        assert up.requests[-1]["path"] == "/metrics"

        status, text = get(f"http://127.0.0.1:{metrics_port}", "/metrics")
        assert status == 200
        assert get(f"http://127.0.0.1:{metrics_port}", "/other")[0] == 404
        lb.stop()
    parsed = {f.name: f for f in text_string_to_metric_families(text.decode())}

    requests = {
        tuple(s.labels[k] for k in ("service", "version", "replica", "method", "code")): s.value
        for s in parsed["steady_lb_requests"].samples
    }
    assert requests == {
        ("svc", "1", "1", "GET", "2xx"): 3.0,
        ("svc", "1", "1", "POST", "2xx"): 1.0,
        ("svc", "1", "1", "GET", "5xx"): 1.0,
        # /metrics itself: answered 404 by the test replica
        ("svc", "1", "1", "GET", "4xx"): 1.0,
    }
    assert {s.labels["entry"] for s in parsed["steady_lb_requests"].samples} == {"endpoint"}
    assert {s.labels["outcome"] for s in parsed["steady_lb_requests"].samples} == {"completed"}
    first = parsed["steady_lb_time_to_first_byte_seconds"]
    assert first.type == "histogram"
    first_buckets = [s for s in first.samples if s.name.endswith("_bucket")]
    assert [s.labels["le"] for s in first_buckets] == [*(str(b) for b in TTFB_BUCKETS), "+Inf"]
    assert first_buckets[-1].value == 6.0  # every response came from the replica
    assert parsed["steady_lb_requests"].type == "counter"
    histogram = parsed["steady_lb_request_duration_seconds"]
    assert histogram.type == "histogram"
    buckets = [s for s in histogram.samples if s.name.endswith("_bucket")]
    assert [s.labels["le"] for s in buckets] == [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]
    assert buckets[-1].value == 6.0
    assert {s.labels["version"] for s in histogram.samples} == {"1"}
    for name in (
        "steady_lb_requests_in_flight",
        "steady_lb_requests_queued",
        "steady_lb_retries",
        "steady_lb_ejections",
        "steady_lb_upstream_connect_failures",
        "steady_lb_received_bytes",
        "steady_lb_sent_bytes",
    ):
        labels = next(s.labels for s in parsed[name].samples)
        assert labels == {"service": "svc", "entry": "endpoint"}, name
    [received] = parsed["steady_lb_received_bytes"].samples
    assert received.value > 100  # the POST body, at least
    [sent] = parsed["steady_lb_sent_bytes"].samples
    assert sent.value > 0

    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 6
    assert set(lines[0]) == {
        "time", "method", "path", "status", "replica", "version", "latency_ms", "bytes", "entry",
        # The day-two fields (docs/observability.md): who called, when, and the request id.
        "ts", "client", "user_agent", "request_id",
        # How it ended, and its time to first byte (lb/access_log.py).
        "outcome", "ttfb_ms",
    }  # fmt: skip
    assert {x["outcome"] for x in lines} == {"completed"}
    assert all(0 < x["ttfb_ms"] <= x["latency_ms"] for x in lines)
    assert {x["entry"] for x in lines} == {"endpoint"}
    assert [(x["method"], x["path"], x["status"]) for x in lines[3:5]] == [
        ("POST", "/echo", 200),
        ("GET", "/status/503", 503),
    ]
    assert lines[0]["replica"] == 1 and lines[0]["version"] == 1 and lines[0]["bytes"] > 0


def test_lb_answers_count_as_version_none_and_a_failed_replica_s_502_as_its_own(
    tmp_path: Path,
) -> None:
    """A 502 whose replica failed is what the client saw of that replica: it counts
    against its version (the canary analysis reads these counts); an answer the
    load balancer gave with no replica involved counts as version none."""
    metrics_port = free_port()
    dead = free_port()  # nothing listens there: connect fails, replica ejected, 502
    with LBProcess(
        tmp_path, "--static-routes", f"127.0.0.1:{dead}", "--metrics-port", str(metrics_port)
    ) as lb:
        assert request(lb.port, "GET", "/")[0] == 502
        assert request(lb.port, "GET", "/", headers={"X-Steady-Version": "9"})[0] == 503
        _, text = get(f"http://127.0.0.1:{metrics_port}", "/metrics")
    parsed = {f.name: f for f in text_string_to_metric_families(text.decode())}
    samples = parsed["steady_lb_requests"].samples
    assert sorted(
        (s.labels["version"], s.labels["replica"], s.labels["code"]) for s in samples
    ) == [("1", "1", "5xx"), ("none", "none", "5xx")]
    [failures] = parsed["steady_lb_upstream_connect_failures"].samples
    assert failures.value >= 1
    [ejections] = parsed["steady_lb_ejections"].samples
    assert ejections.value >= 1


def test_rare_methods_fold_into_other_and_reports_merge() -> None:
    report = {
        "requests": {"1 2 PROPFIND 2": 2, "1 2 GET 2": 5},
        "latency": {"1": [1.0] * len(LATENCY_BUCKETS) + [0.0, 3.5]},
        "retries": 1,
    }
    merged = merge_counts(report, report)
    assert merged["requests"] == {"1 2 PROPFIND 2": 4, "1 2 GET 2": 10}
    assert merged["retries"] == 2
    assert merged["latency"]["1"][-1] == 7.0
    [requests, *_] = families([("svc", merged)])
    assert {s.labels["method"]: s.value for s in requests.samples} == {"OTHER": 4, "GET": 10}


def test_quantile_interpolates_inside_the_bucket() -> None:
    bounds = [0.001, 0.01, 0.1]
    assert quantile(0.5, bounds, [0, 10, 0, 0]) == pytest.approx(0.0055)
    assert quantile(0.99, bounds, [100, 0, 0, 0]) == pytest.approx(0.00099)
    assert quantile(0.5, bounds, [0, 0, 0, 4]) == 0.1  # beyond the last bound
    assert quantile(0.5, bounds, [0, 0, 0, 0]) is None


def _counts(version: str, ok: int, errors: int, fast: int) -> dict[str, object]:
    slots = [0.0] * (len(LATENCY_BUCKETS) + 2)
    slots[1] = float(fast)  # <= 1 ms
    return {
        "requests": {f"{version} 1 GET 2": ok, f"{version} 1 GET 5": errors},
        "latency": {version: slots},
    }


def test_traffic_samples_rates_per_version_and_survives_an_lb_restart() -> None:
    traffic = Traffic()
    traffic.ingest(10, _counts("1", 0, 0, 0), now=100.0)
    traffic.ingest(10, _counts("1", 100, 10, 110), now=101.0)
    # The LB restarted (new pid): its counters start again from zero.
    traffic.ingest(11, _counts("1", 50, 0, 50), now=102.0)
    series = traffic.timeseries()
    assert series["time"] == [101.0, 102.0]
    assert series["versions"]["1"]["rps"] == [110.0, 50.0]
    assert series["versions"]["1"]["errors"] == [10.0, 0.0]
    p50 = series["versions"]["1"]["p50"][0]
    assert p50 is not None and 0.5 <= p50 <= 1.0  # ms, inside the 0.5-1 ms bucket
    assert traffic.counts()["requests"]["1 1 GET 2"] == 150


def test_access_log_rotates_and_keeps_a_bounded_number_of_files(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    log = AccessLog(path, max_bytes=2000, backups=2)

    class Ex:
        """What the access log reads of an exchange (lb/exchange.py)."""

        head = b"GET /x HTTP/1.1\r\n\r\n"
        status = 200
        outcome = "completed"
        request_id = b"test-1"
        attempts = 1
        client = SimpleNamespace(
            head=SimpleNamespace(xff=b"127.0.0.1"), proxy=SimpleNamespace(limits=Limits())
        )

    for _ in range(400):
        log.request(Ex(), 1, 1, 0.001, 10, 0.0005)  # type: ignore[arg-type]
        log.flush()
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["access.log", "access.log.1", "access.log.2"]
    assert all(p.stat().st_size <= 2000 for p in tmp_path.iterdir())
    assert json.loads(path.read_text().splitlines()[-1])["path"] == "/x"


def test_access_log_field_is_a_bool_and_changes_in_place(tmp_path: Path) -> None:
    base = "name: web\nservice:\n  replicas: 1\n{extra}run: python3 server.py\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text(base.format(extra="  access_log: often\n"))
    with pytest.raises(SpecError, match=r"service\.access_log"):
        load_service_file(bad)
    off = tmp_path / "off.yaml"
    off.write_text(base.format(extra=""))
    on = tmp_path / "on.yaml"
    on.write_text(base.format(extra="  access_log: true\n"))
    old: ServiceSpec = load_service_file(off)
    new: ServiceSpec = load_service_file(on)
    assert old.service.access_log is False and new.service.access_log is True
    changes = classify(old, new, old_workdir_hash=None, new_workdir_hash=None)
    assert not changes.needs_restart
    assert [c.path for c in changes.changes] == ["service.access_log"]
