"""SkyServe's CLI shapes: ``steady serve up|status|update|logs|down``, ``steady up
--dry-run``, ``--ignore-image`` and ``status --endpoint``, with the real CLI and
one real service (a stdlib HTTP server, one replica)."""

from __future__ import annotations

from pathlib import Path

from steadyserve.client.connection import controller_alive
from steadyserve.home.paths import Home
from tests.helpers.certs import make_pair
from tests.helpers.steady import Steady, http_get

SERVER = Path(__file__).resolve().parents[2] / "examples/http_server/server.py"

SERVICE = """\
service:
  readiness_probe: /health
  replicas: 1
  health_check_period_s: 1
  graceful_shutdown_wait_loop_s: 0.2
  graceful_shutdown_timeout_s: 2
workdir: .
run: python3 server.py
"""


def _service(tmp: Path, extra: str = "") -> Path:
    (tmp / "server.py").write_text(SERVER.read_text())
    path = tmp / "service.yaml"
    path.write_text(SERVICE + extra)
    return path


def test_up_dry_run_prints_the_plan_and_starts_nothing(steady: Steady, tmp_path: Path) -> None:
    path = _service(tmp_path)
    out = steady.run("up", "-n", "web", str(path), "--dry-run")
    assert out.stdout.splitlines() == [
        "web: would be created with 1 command replica, at the next free port from 30001;"
        " nothing started"
    ]
    assert controller_alive(Home(steady.home)) is None


def test_up_dry_run_gives_every_file_error_at_once(steady: Steady, tmp_path: Path) -> None:
    path = _service(tmp_path, "resources:\n  image_id: docker:vllm/vllm-openai\n")
    path.write_text(path.read_text().replace("replicas: 1", "replicas: -1"))
    out = steady.run("up", str(path), "--dry-run", check=False)
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "service.replicas" in lines[0]  # the loader's errors first
    fixed = path.read_text().replace("replicas: -1", "replicas: 1")
    path.write_text(fixed.replace("health_check_period_s: 1", "health_check_period_s: -1"))
    out = steady.run("up", str(path), "--dry-run", check=False)
    assert out.returncode == 2
    assert controller_alive(Home(steady.home)) is None


def test_image_id_refused_then_started_with_ignore_image(steady: Steady, tmp_path: Path) -> None:
    path = _service(tmp_path, "resources:\n  image_id: docker:vllm/vllm-openai\n")
    refused = steady.run("serve", "up", "-n", "img", str(path), check=False)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: {path}: resources.image_id: docker:vllm/vllm-openai is an image replicas would"
        " run in; here they run on this machine's host, without it; pass --ignore-image to run"
        " it on the host anyway"
    ]
    assert controller_alive(Home(steady.home)) is None
    dry = steady.run("up", "-n", "img", str(path), "--dry-run", "--ignore-image")
    assert "(--ignore-image: starting anyway)" in dry.stderr


def test_a_mismatched_tls_pair_is_refused_before_anything_starts(
    steady: Steady, tmp_path: Path
) -> None:
    _, cert_a = make_pair(tmp_path, "a")
    key_b, _ = make_pair(tmp_path, "b")
    path = _service(tmp_path)
    tls = f"  tls:\n    keyfile: {key_b}\n    certfile: {cert_a}\n"
    path.write_text(path.read_text().replace("service:\n", "service:\n" + tls, 1))
    out = steady.run("up", str(path), check=False)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: {path}: service.tls: certfile {cert_a} and keyfile {key_b}: the key does not"
        " match the certificate"
    ]
    assert controller_alive(Home(steady.home)) is None


def test_a_skyserve_script_runs_with_sky_replaced_by_steady(steady: Steady, tmp_path: Path) -> None:
    path = _service(tmp_path)
    up = steady.run("serve", "up", "-n", "web", str(path))
    assert "Service web is starting at http://127.0.0.1:" in up.stdout
    url = steady.run("serve", "status", "--endpoint", "web").stdout
    assert url == steady.run("status", "web", "--endpoint").stdout
    assert url.startswith("http://127.0.0.1:") and url.count("\n") == 1
    port = int(url.strip().rsplit(":", 1)[1])
    steady.wait_for("web", lambda s: s["status"] == "READY", timeout=30, what="web READY")
    assert http_get(port)[0] == 200
    table = steady.run("serve", "status", "web").stdout
    assert table.splitlines()[0] == "Services" and "Service Replicas" in table
    plan = steady.run("serve", "update", "web", str(path), "--mode", "blue_green", "-y")
    assert plan.stdout.startswith("web: no change")
    log = steady.run("serve", "logs", "web", "1", "--no-follow", "--tail", "5")
    assert log.returncode == 0
    assert steady.run("serve", "down", "web", "-y").stdout == "Service web is down.\n"
    both = steady.run("serve", "status", "--endpoint", check=False)
    assert both.returncode == 2
    assert both.stderr == "error: --endpoint takes exactly one service name\n"
