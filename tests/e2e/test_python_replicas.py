"""Python replicas end to end: the text_ml example deployed, user_config changed in
place under load, a broken __init__ rolled back, a generator streamed."""

from __future__ import annotations

import http.client
import json
import shutil
import time
from pathlib import Path

from tests.helpers.figures import report
from tests.helpers.steady import EXAMPLES, LoadClient, Steady, http_get

APPS = Path(__file__).parent / "apps"


def fleet_copy(tmp: Path) -> Path:
    app = tmp / "text_ml"
    shutil.copytree(EXAMPLES / "text_ml", app)
    text = (app / "fleet.yaml").read_text()
    text = text.replace("health_check_period_s: 1", "health_check_period_s: 0.2")
    (app / "fleet.yaml").write_text(text)
    return app / "fleet.yaml"


def port_of(svc: dict[str, object]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def test_user_config_change_in_place_under_load(steady: Steady, tmp_path: Path) -> None:
    fleet = fleet_copy(tmp_path)
    steady.run("deploy", str(fleet), "--wait", "--timeout", "90")
    svc = steady.service("translator")
    port = port_of(svc)
    before = sorted(r["pid"] for r in svc["replicas"])
    status, body = http_get(port, "/?text=good+morning")
    assert status == 200 and json.loads(body)["language"] == "french"

    client = LoadClient(port, path="/?text=good+morning", max_seconds=60).start()
    time.sleep(0.5)
    fleet.write_text(fleet.read_text().replace("language: french", "language: german"))
    out = steady.run("deploy", str(fleet), "--wait", "--timeout", "60").stdout
    assert "in place" in out
    marker = time.time()
    time.sleep(0.5)
    client.stop()
    report(f"user_config in place (Python replicas): {client.summary()}")
    assert client.failed == 0 and client.sent > 50
    languages = [json.loads(b)["language"] for t, b in client.bodies if t > marker]
    assert set(languages) == {"german"}
    after = steady.service("translator")
    assert sorted(r["pid"] for r in after["replicas"]) == before
    assert after["version"] == 2
    assert steady.service("summarizer")["version"] == 1  # unchanged services stay put


def test_broken_init_fails_the_update_and_old_keeps_serving(steady: Steady, tmp_path: Path) -> None:
    def spec(import_path: str) -> str:
        return (
            f"name: py\nimport_path: {import_path}\nworkdir: {APPS}\n"
            "service:\n  replicas: 1\n  health_check_period_s: 0.2\n"
            "  graceful_shutdown_timeout_s: 3\n  graceful_shutdown_wait_loop_s: 0.05\n"
        )

    good = tmp_path / "good.yaml"
    good.write_text(spec("pyapps:Streamer"))
    steady.run("up", str(good), "--wait", "--timeout", "60")
    port = port_of(steady.service("py"))
    client = LoadClient(port, max_seconds=60).start()
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec("pyapps:Broken"))
    proc = steady.run("update", "py", str(bad), "--wait", "--timeout", "60", check=False)
    assert proc.returncode == 1 and "FAILED" in proc.stderr
    time.sleep(0.3)
    client.stop()
    report(f"broken __init__ update: {client.summary()}")
    assert client.failed == 0 and client.sent > 20
    svc = steady.service("py")
    assert svc["version"] == 1 and svc["status"] == "READY"
    log = steady.run("logs", "py").stdout
    assert "model file is corrupt" in log

    # A bad import_path is bad input, caught before anything changes.
    typo = tmp_path / "typo.yaml"
    typo.write_text(spec("pyapps:Streamr"))
    proc = steady.run("update", "py", str(typo), check=False)
    assert proc.returncode == 2 and "Streamr" in proc.stderr


def test_generator_streams_chunk_by_chunk(steady: Steady, tmp_path: Path) -> None:
    path = tmp_path / "stream.yaml"
    path.write_text(
        f"name: streamer\nimport_path: pyapps:Streamer\nworkdir: {APPS}\n"
        "service:\n  replicas: 1\n  health_check_period_s: 0.2\n"
    )
    steady.run("up", str(path), "--wait", "--timeout", "60")
    gate = tmp_path / "gate"
    conn = http.client.HTTPConnection("127.0.0.1", port_of(steady.service("streamer")), timeout=10)
    conn.request("GET", f"/?gate={gate}")
    resp = conn.getresponse()
    assert resp.status == 200
    # The replica holds chunk-1 until the gate exists: chunk-0 arriving first proves
    # neither the runner nor the load balancer buffers the stream.
    first = resp.read1(65536)
    assert b"chunk-0" in first and b"chunk-1" not in first
    gate.touch()
    rest = resp.read()
    assert b"chunk-1" in rest and b"chunk-2" in rest
    conn.close()
