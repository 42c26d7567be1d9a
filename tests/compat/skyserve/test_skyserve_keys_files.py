"""SkyServe keys this project handles or refuses, with SkyPilot's files that use them
(copies under ``tree/``, each headed by where it comes from), through ``steady up
--dry-run`` run from the tree's root as ``sky serve up`` is: nothing starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from steadyserve.core.planner import ReplicaView, plan_steady
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import SpecError, load_service_file, parse_service
from tests.helpers.steady import Steady

TREE = Path(__file__).parent / "tree"


def dry_run(steady: Steady, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steadyserve.cli", "up", path, "--dry-run"],
        cwd=TREE,
        env=steady.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_auth_server_file_is_accepted_and_a_bad_key_named(steady: Steady) -> None:
    """SkyPilot's auth-server.yaml runs (its key checked by the load balancer, tested
    end to end in tests/e2e/test_files_people_keep.py); a key a header cannot carry
    is one line naming the field."""
    out = dry_run(steady, "examples/serve/auth-server.yaml")
    assert out.returncode == 0, out.stderr
    bad = TREE / "examples/serve/auth-server.yaml"
    text = bad.read_text().replace("sky-authkey-3d2105b9-a9ba-4f13", "'two words'")
    document = yaml.safe_load(text)
    with pytest.raises(SpecError, match=r"service\.auth_key: must be 1 to 512 visible"):
        parse_service(document, base_dir=TREE, name="auth")


def test_replica_failure_file_runs_with_auto_restart_off(
    steady: Steady, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = dry_run(steady, "tests/skyserve/replica_failure/service.yaml")
    assert out.returncode == 0, out.stderr
    assert "resources.zone: not applicable to the local backend" in out.stderr
    monkeypatch.chdir(TREE)  # its workdir is relative to SkyPilot's root
    spec = load_service_file("tests/skyserve/replica_failure/service.yaml")
    assert spec.service.replica_policy is not None
    assert spec.service.replica_policy.auto_restart is False


def test_auto_restart_false_keeps_a_failed_replica_in_its_place() -> None:
    """SkyServe's auto_restart: false: a failed replica is not replaced (its row stays,
    so it keeps counting); true (the default) replaces it."""
    views = [
        ReplicaView(1, 1, ReplicaStatus.READY),
        ReplicaView(2, 1, ReplicaStatus.FAILED),
        ReplicaView(3, 1, ReplicaStatus.READY),
    ]
    kept = plan_steady(3, 1, views, version_broken=False, replace_failed=False)
    assert kept.launch == 0 and 2 not in kept.forget
    replaced = plan_steady(3, 1, views, version_broken=False)
    assert replaced.launch == 1
    # Failures beyond the listed few are still not forgotten (forgotten, they would be
    # replaced): five of five failed stay five.
    dead = [ReplicaView(i, 1, ReplicaStatus.FAILED) for i in range(1, 6)]
    none = plan_steady(5, 1, dead, version_broken=False, replace_failed=False)
    assert none.launch == 0 and none.forget == ()


def test_a_run_that_binds_the_endpoint_port_is_refused_at_up(steady: Steady) -> None:
    """SkyPilot's examples/serve/ray_serve/ray_serve.yaml: service.port 8000 (its
    replica's port in SkyServe's older files), and serve run, which binds 8000 too."""
    out = dry_run(steady, "examples/serve/ray_serve/ray_serve.yaml")
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "error: examples/serve/ray_serve/ray_serve.yaml: service.port: 8000 is the endpoint's"
        " port here (the load balancer binds it), and run binds 8000 too (serve run listens"
        " on 8000); in SkyServe's older files service.port was the replica's port: write"
        " service.ports: 8000 for the replica, and steady up --port N for the endpoint"
    ]


def test_any_of_alternatives_name_their_cloud_keys_and_instance_aware_needs_no_map(
    steady: Steady, tmp_path: Path
) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text(
        "service:\n  readiness_probe: /\n  replicas: 1\n"
        "  load_balancing_policy: instance_aware_least_load\n"
        "resources:\n  any_of:\n    - {zone: us-central1-a, cpus: 1+}\n"
        "    - {region: us-east1}\n"
        "run: python3 -m http.server $PORT\n"
    )
    out = dry_run(steady, str(path))
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stderr.splitlines() if line.startswith("note: resources")]
    assert notes == [
        "note: resources.any_of[0].zone: not applicable to the local backend (replicas run"
        " on this machine); ignored",
        "note: resources.any_of[1].region: not applicable to the local backend (replicas run"
        " on this machine); ignored",
    ]
