"""Every key of SkyServe's service schema has a row in docs/skyserve.md's key table
and a behaviour here: it parses (handled, or named as not applicable), or it is
refused with a line that says what it was in SkyServe (never a bare "unknown
field", which would read as a typo in a file that works on SkyServe).

The keys: ``get_service_schema`` in SkyPilot's ``sky/utils/schemas.py`` at commit
00052dfe0d132c5ad6aa9a175572b0695f747c80, plus the keys its older releases had
(``port``, ``auth_key``, ``replica_policy.auto_restart``, ``controller_resources``,
``https``), each with a value its schema accepts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from steadyserve.spec import SpecError, parse_service

REPO = Path(__file__).resolve().parents[2]

SCHEMA_KEYS: dict[str, Any] = {
    "readiness_probe": "/health",
    "readiness_probe.path": "/health",
    "readiness_probe.initial_delay_seconds": 30,
    "readiness_probe.timeout_seconds": 5,
    "readiness_probe.endpoint_probe_interval_seconds": 5,
    "readiness_probe.consecutive_failure_threshold_timeout": 60,
    "readiness_probe.post_data": {"model": "m"},
    "readiness_probe.headers": {"X-Key": "v"},
    "load_balancer.stream_timeout_seconds": 30,
    "pool.workers": 2,
    "pool.min_workers": 1,
    "pool.max_workers": 3,
    "pool.queue_length_threshold": 2,
    "pool.upscale_delay_seconds": 10,
    "pool.downscale_delay_seconds": 10,
    "replica_policy.min_replicas": 1,
    "replica_policy.max_replicas": 3,
    "replica_policy.num_overprovision": 1,
    "replica_policy.target_qps_per_replica": 2,
    "replica_policy.dynamic_ondemand_fallback": True,
    "replica_policy.base_ondemand_fallback_replicas": 1,
    "replica_policy.spot_placer": "dynamic_fallback",
    "replica_policy.upscale_delay_seconds": 10,
    "replica_policy.downscale_delay_seconds": 10,
    "replica_policy.auto_restart": False,
    "ports": 8080,
    "replicas": 2,
    "workers": 2,
    "load_balancing_policy": "round_robin",
    "tls.keyfile": "key.pem",
    "tls.certfile": "cert.pem",
    "https.key": "key.pem",
    "https.cert": "cert.pem",
    "auth_key": "sky-authkey-0000",
    "port": 8000,
    "controller_resources": {"cpus": 2},
}
NEEDS = {
    "replica_policy": {"min_replicas": 1, "max_replicas": 3, "target_qps_per_replica": 2},
    "pool": {"min_workers": 1, "max_workers": 3},
    "tls": {"keyfile": "key.pem", "certfile": "cert.pem"},
    "https": {"key": "key.pem", "cert": "cert.pem"},
    "readiness_probe": {"path": "/health"},
}
"""The siblings a nested key's schema (or the key's own rules) require beside it."""


def _document(key: str, value: Any) -> dict[str, Any]:
    head, _, leaf = key.partition(".")
    service: dict[str, Any] = {"readiness_probe": "/health"}
    if not leaf:
        service[head] = value
    else:
        section = {} if key == "pool.workers" else dict(NEEDS.get(head, {}))
        section[leaf] = value
        service[head] = section
    if head in ("pool", "workers"):  # a pool's workers run the jobs' commands, not one of theirs
        return {"service": service}
    return {"service": service, "run": "python3 -m http.server $PORT"}


@pytest.mark.parametrize("key", sorted(SCHEMA_KEYS))
def test_each_key_is_handled_or_refused_with_what_it_was(key: str, tmp_path: Path) -> None:
    for name in ("key.pem", "cert.pem"):
        (tmp_path / name).write_text("x")
    document = _document(key, SCHEMA_KEYS[key])
    try:
        parse_service(document, base_dir=tmp_path, name="svc")
    except SpecError as exc:
        found = [m for path, m in exc.all() if path == f"service.{key}"]
        assert found, f"service.{key}: refused for another reason: {exc.lines()}"
        assert "unknown field" not in found[0], f"service.{key}: {found[0]}"
        assert "SkyServe" in found[0] or "SkyPilot" in found[0], found[0]


def test_each_key_has_a_row_in_the_skyserve_key_table() -> None:
    text = (REPO / "docs" / "skyserve.md").read_text(encoding="utf-8")
    table = text[text.index("## Every SkyServe key") :]
    table = table[: table.index("\n## ")]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    missing = []
    for key in SCHEMA_KEYS:
        parent, _, leaf = key.rpartition(".")
        full = f"`service.{key}`"
        in_parent_row = any(
            re.search(rf"`(service\.)?{re.escape(parent)}[`.]", row) and f"`{leaf}`" in row
            for row in rows
        )
        if not any(full in row for row in rows) and not (parent and in_parent_row):
            missing.append(key)
    assert not missing, f"docs/skyserve.md's key table has no row for: {missing}"
