"""The Ray backend across two nodes: a node dies under load, its replicas become
PREEMPTED and are replaced on the surviving node; a restarted controller finds
its replica actors again by name.

The two nodes are two network namespaces (tests/helpers/raycluster.py); node loss
is every process of the worker's namespace killed at once.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import textwrap
from pathlib import Path

import pytest

from steadyserve.backends.ray import actor_name
from steadyserve.wire.replica_contract import home_id
from tests.helpers.figures import report
from tests.helpers.raycluster import HEAD_IP, WORKER_IP, RayCluster
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, http_get


def service_file(tmp: Path, replicas: int = 2) -> Path:
    path = tmp / "web.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe:
            path: /health
            initial_delay_seconds: 20
          replicas: {replicas}
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 2
        workdir: {EXAMPLES / "http_server"}
        run: python3 server.py
        """)
    )
    return path


def ready_on(svc: dict[str, object]) -> list[str]:
    replicas = svc["replicas"]
    assert isinstance(replicas, list)
    return sorted(r["ip"] for r in replicas if r["status"] == "READY")


@pytest.mark.parametrize("steady", ["ray"], indirect=True)
def test_node_loss_under_load_preempts_and_replaces(
    steady: Steady, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    steady.run("up", str(service_file(tmp_path)), "--wait", "--timeout", "90")
    svc = steady.service("web")
    assert ready_on(svc) == [HEAD_IP, WORKER_IP]  # spread over both nodes
    port = int(str(svc["endpoint"]).rsplit(":", 1)[1])
    client = LoadClient(port, max_seconds=120).start()
    try:
        ray_cluster.kill_worker()
        svc = steady.wait_for(
            "web",
            lambda s: (
                ready_on(s) == [HEAD_IP, HEAD_IP]
                and any(r["status"] == "PREEMPTED" for r in s["replicas"])
            ),
            timeout=90,
            what="the worker's replica PREEMPTED and replaced on the head",
        )
        for _ in range(20):
            assert http_get(port)[0] == 200
    finally:
        client.stop()
        ray_cluster.start_worker()  # the next tests get both nodes back
    report(f"Ray node lost under load: {client.summary()}")
    events = steady.run("status", "web", "--events").stdout
    assert "its node is gone" in events
    # Only requests in flight on the lost replica may fail; the LB retries GETs
    # that did not reach a replica, and one client has one request in flight.
    assert client.failed <= 1, client.summary()
    history = json.loads(steady.run("history", "web", "--json").stdout)
    assert [v["outcome"] for v in history["versions"]] == ["active"]  # not a failed version


def test_an_unreachable_cluster_is_one_line_and_exit_2(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """Inside the head's namespace (so nothing reaches the machine's own address),
    a port where no Ray cluster listens: refused in seconds, nothing created."""
    home = tmp_path / "home"
    steady = Steady(home, {"STEADY_BACKEND": "ray", "STEADY_RAY_ADDRESS": f"{HEAD_IP}:1"})
    with ray_cluster.entered():
        done = steady.run("up", str(service_file(tmp_path)), check=False, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: cannot reach the Ray cluster at '{HEAD_IP}:1'")
    assert not (home / "services" / "web").exists()  # nothing was created


def test_ray_backend_without_ray_installed_says_what_to_install(tmp_path: Path) -> None:
    """A Python where ``import ray`` fails (a stand-in package first on the path)."""
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = {
        "STEADY_BACKEND": "ray",
        "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]),
    }
    steady = Steady(tmp_path / "home", env)
    done = steady.run("up", str(service_file(tmp_path)), check=False, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: the ray backend needs Ray: pip install 'steadyserve[ray]'"
    )


@pytest.mark.parametrize("steady", ["ray"], indirect=True)
def test_a_fixed_port_runs_one_replica_per_node(steady: Steady, tmp_path: Path) -> None:
    """SkyServe's fixed replica port (``run`` ignores ``$PORT``): on Ray, one replica
    per node, each on that port at its node's address; more than the nodes: refused."""
    path = tmp_path / "fixed.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: fixed
        service:
          readiness_probe: /health
          replicas: 2
          ports: 18080
          health_check_period_s: 0.2
          graceful_shutdown_timeout_s: 2
        workdir: {EXAMPLES / "http_server"}
        run: python3 server.py
        """)
    )
    steady.run("up", str(path), "--wait", "--timeout", "90")
    svc = steady.service("fixed")
    assert sorted((r["ip"], r["port"]) for r in svc["replicas"]) == [
        (HEAD_IP, 18080),
        (WORKER_IP, 18080),
    ]
    port = int(str(svc["endpoint"]).rsplit(":", 1)[1])
    seen = {json.loads(http_get(port)[1])["replica_id"] for _ in range(20)}
    assert seen == {"1", "2"}
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 3"))
    refused = steady.run("update", "fixed", str(path), check=False)
    assert refused.returncode == 2, refused.stderr
    assert "the Ray cluster's 2 nodes hold 2 such replicas, 3 asked" in refused.stderr
    assert steady.service("fixed")["version"] == 1  # nothing changed

    # A restarted controller reserves the adopted replicas' nodes again: each
    # replica killed in turn is replaced on its own node, not onto the other's port.
    controller = json.loads(steady.run("controller", "status", "--json").stdout)["pid"]
    os.kill(controller, signal.SIGKILL)
    steady.wait_for("fixed", lambda s: s["ready_replicas"] == 2, what="re-adopted")
    assert json.loads(steady.run("controller", "status", "--json").stdout)["pid"] != controller
    for ip in (WORKER_IP, HEAD_IP):  # the head is the first node Ray lists
        svc = steady.service("fixed")
        victim = next(r for r in svc["replicas"] if r["status"] == "READY" and r["ip"] == ip)
        os.kill(victim["pid"], signal.SIGKILL)
        steady.wait_for(
            "fixed",
            lambda s, ip=ip, gone=victim["id"]: (
                sorted((r["ip"], r["port"]) for r in s["replicas"] if r["status"] == "READY")
                == [(HEAD_IP, 18080), (WORKER_IP, 18080)]
                and all(r["id"] != gone for r in s["replicas"] if r["status"] == "READY")
            ),
            timeout=60,
            what=f"the replica on {ip} replaced on its own node",
        )
    # Two replacements, each placed right the first time (a replica sent onto the
    # other node's port would fail to bind and take another id).
    final = steady.service("fixed")["replicas"]
    assert max(r["id"] for r in final) == 4, [(r["id"], r["status"], r["ip"]) for r in final]

    # Taken down, every replica's output is in the home and none is left on the
    # nodes (each actor deletes its copy once the controller has all of it).
    live = [r["id"] for r in final if r["status"] == "READY"]
    steady.run("down", "fixed")
    names = [actor_name(home_id(steady.home), "fixed", rid) for rid in range(1, 5)]
    logs = Path(tempfile.gettempdir()) / "steadyserve-ray-logs"
    left = [p.name for p in logs.glob("*.log") if any(p.name.startswith(n + "-") for n in names)]
    assert left == [], left
    for rid in live:
        assert "listening" in steady.home.joinpath(
            "services", "fixed", "replicas", f"{rid}.log"
        ).read_text(errors="replace")
