"""The wire formats between the controller and the load balancer: what one side
writes, the other reads back unchanged, and a bad field is refused by name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.core.routing.options import PolicyOptions, ReplicaMetrics
from steadyserve.core.routing.registry import POLICIES
from steadyserve.wire.load_report import LoadReport
from steadyserve.wire.mirror import Mirror
from steadyserve.wire.routes import Limits, ReplicaRoute, RouteTable

ids = st.integers(min_value=1, max_value=10_000)
seconds = st.floats(min_value=0.001, max_value=1e6, allow_nan=False)

routes = st.builds(
    ReplicaRoute,
    id=ids,
    version=ids,
    host=st.sampled_from(["127.0.0.1", "10.0.0.2", "::1"]),
    port=st.integers(min_value=1, max_value=65535),
    accelerator=st.none() | st.sampled_from(["A100", "L4", "H100"]),
    capacity=st.floats(min_value=0.01, max_value=100, allow_nan=False),
    models=st.none() | st.frozensets(st.sampled_from(["m1", "lora-2", ""]), max_size=3),
)
limits = st.none() | st.builds(
    Limits,
    header_timeout_s=seconds,
    body_timeout_s=seconds,
    idle_timeout_s=seconds,
    max_connections=st.integers(min_value=1, max_value=100_000),
    request_timeout_s=st.none() | seconds,
)
tables = st.builds(
    RouteTable,
    epoch=st.text(min_size=1, max_size=12),
    version=st.integers(min_value=0, max_value=10**6),
    policy=st.sampled_from(sorted(POLICIES)),
    max_ongoing_requests=st.integers(min_value=1, max_value=1000),
    max_queued_requests=st.integers(min_value=-1, max_value=1000),
    replicas=st.lists(routes, max_size=6, unique_by=lambda r: r.id).map(tuple),
    blocked_paths=st.frozensets(st.sampled_from([b"/-/reconfigure", b"/-/steady/call"])),
    limits=limits,
    hold_at_zero_s=st.floats(min_value=0, max_value=600, allow_nan=False),
    access_log=st.booleans(),
    websocket_drain_s=st.floats(min_value=0, max_value=600, allow_nan=False),
    weights=st.dictionaries(ids, st.integers(min_value=0, max_value=100), max_size=3).map(
        lambda d: tuple(sorted(d.items()))
    ),
    preview=st.none() | st.tuples(st.integers(min_value=1, max_value=65535), ids),
    options=st.builds(
        PolicyOptions,
        block_bytes=st.integers(1, 4096),
        max_entries_per_replica=st.integers(1, 10**6),
        imbalance_threshold=st.floats(min_value=0, max_value=100, allow_nan=False),
        affinity_key=st.none() | st.sampled_from(["header:X-Session-ID", "json:/user"]),
        affinity_epsilon=st.floats(min_value=0, max_value=10, allow_nan=False),
        replica_metrics=st.none()
        | st.builds(
            ReplicaMetrics,
            path=st.just("/metrics"),
            gauge=st.sampled_from(["vllm:num_requests_waiting", "queue"]),
            interval_s=seconds,
            timeout_s=seconds,
            max_age_s=seconds,
        ),
    ),
    multiplexed=st.booleans(),
    mirror=st.none()
    | st.builds(
        Mirror,
        version=st.integers(1, 10**6),
        percent=st.integers(1, 100),
        methods=st.sampled_from([("GET",), ("GET", "POST")]),
        max_body_bytes=st.integers(0, 256 * 1024),
        headers=st.sampled_from([(), ("etag", "content-type")]),
        ignore=st.sampled_from([(), ("$.at", "$.items[*].id", '$["a b"]')]),
        noise_share=st.floats(0, 1),
        stream_tolerance=st.floats(0, 1),
    ),
)


@given(tables)
def test_a_route_table_reads_back_as_it_was_written(table: RouteTable) -> None:
    assert RouteTable.from_json(json.loads(json.dumps(table.to_json()))) == table


def test_a_table_without_the_candidate_fields_reads_as_before() -> None:
    data = RouteTable("e", 1, "least_load", 2, -1, (ReplicaRoute(1, 1, "h", 80),)).to_json()
    assert data["replicas"] == [{"id": 1, "version": 1, "host": "h", "port": 80}]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"policy": "fastest"}, "unknown policy"),
        ({"replicas": [{"id": 1, "version": 1, "host": "h", "port": "80"}]}, "replicas[0].port"),
        ({"replicas": [{"id": 1, "version": 1, "host": "h", "port": 1, "capacity": 0}]}, "capa"),
        ({"weights": {"x": 5}}, "weights"),
        ({"preview": {"port": 0, "version": 1}}, "preview.port"),
        ({"load_balancer": {"max_connections": 0}}, "max_connections"),
        ({"hold_at_zero_s": -1}, "hold_at_zero_s"),
        ({"policy_options": {"block_bytes": 0}}, "policy_options.block_bytes"),
        ({"replicas": [{"id": 1, "version": 1, "host": "h", "port": 1, "models": [1]}]}, "models"),
        ({"multiplexed": "yes"}, "multiplexed"),
        ({"mirror": {"version": 2, "percent": 0}}, "mirror.percent"),
        (
            {"mirror": {**Mirror(2, 5).to_json(), "ignore": ["$.a["]}},
            "mirror.ignore: .* is not a JSON path",
        ),
        ({"mirror": {**Mirror(2, 5).to_json(), "max_body_bytes": 10**9}}, "mirror.max_body"),
        ({"policy_options": {"replica_metrics": {"path": "/m"}}}, "replica_metrics.interval_s"),
    ],
)
def test_a_bad_route_table_field_is_named(change: dict[str, object], field: str) -> None:
    data = {**RouteTable("e", 1, "least_load", 2, -1, ()).to_json(), **change}
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        RouteTable.from_json(data)


@given(
    st.builds(
        LoadReport,
        table=st.text(max_size=10),
        inflight=st.dictionaries(ids, st.integers(0, 1000), max_size=4),
        requests=st.dictionaries(ids, st.integers(0, 10**9), max_size=4),
        errors=st.dictionaries(ids, st.integers(0, 10**9), max_size=4),
        queued=st.integers(0, 1000),
        worker=st.text(max_size=8),
        lb_pid=st.none() | st.integers(1, 2**22),
        consumer=st.none() | st.just("gateway"),
        metrics=st.none() | st.just({"requests": {"1 1 GET 200": 3}}),
        time=st.floats(min_value=0, max_value=2e9, allow_nan=False),
    )
)
def test_a_load_report_reads_back_as_it_was_written(report: LoadReport) -> None:
    assert LoadReport.from_json(json.loads(json.dumps(report.to_json()))) == report


@pytest.mark.parametrize(
    "bad", [{"inflight": {"x": 1}}, {"requests": {"1": "many"}}, {"queued": 1.5}, []]
)
def test_a_bad_load_report_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="load report"):
        LoadReport.from_json(bad)
