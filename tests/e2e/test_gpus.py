"""GPUs divided among replicas, end to end (docs/gpus.md).

These machines have no GPU, so a stand-in ``nvidia-smi`` on the controller's
PATH lists 8 A100s (``--query-gpu`` and ``-L``, as the real one answers). One
controller for the module, in this order: 4 replicas x ``A100:2`` get disjoint
pairs and each replica's own ``CUDA_VISIBLE_DEVICES`` says so; a blue-green update
on the full box is refused with one line; a rolling update of all four serves
with 0 failed requests and no two replicas ever sharing a GPU at any status
sample; a fifth replica (another service) is PENDING with the reason and starts
when one stops; a controller SIGKILL keeps every assignment.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _steady_in
from tests.helpers.steady import LoadClient, Steady, api_headers, http_get

APPS = Path(__file__).parent / "apps"
FAKE_SMI = """#!/bin/sh
# A stand-in for nvidia-smi: no GPU on the test machines.
case "$*" in
  *--query-gpu*) for i in 0 1 2 3 4 5 6 7; do
      echo "$i, GPU-0000-$i, NVIDIA A100-SXM4-80GB, 81920"; done ;;
  *-L*) for i in 0 1 2 3 4 5 6 7; do
      echo "GPU $i: NVIDIA A100-SXM4-80GB (UUID: GPU-0000-$i)"; done ;;
  *) exit 9 ;;
esac
"""


def service_file(tmp: Path, name: str, *, replicas: int, message: str) -> Path:
    path = tmp / f"{name}-{message}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        service:
          readiness_probe: {{path: /health, initial_delay_seconds: 20, timeout_seconds: 2}}
          replicas: {replicas}
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 2
        resources:
          accelerators: A100:2
        workdir: {APPS}
        envs:
          MESSAGE: {message}
        run: python3 gpu_echo.py
        """)
    )
    return path


@pytest.fixture(scope="module")
def box() -> Iterator[tuple[Steady, Path]]:
    with tempfile.TemporaryDirectory(prefix="steady-gpu-") as tmp:
        bin_dir = Path(tmp) / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(FAKE_SMI)
        smi.chmod(0o755)
        home = Path(tmp) / "home"
        env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        for cli in _steady_in(Steady(home, extra_env=env), home):
            yield cli, Path(tmp)


def api_status(steady: Steady) -> list[dict[str, Any]]:
    """Every service's status straight from the controller's API: a sample every
    few milliseconds, where the CLI takes a second to start."""
    url = json.loads((steady.home / "controller.json").read_text())["url"]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/api/v1/services", headers=api_headers(steady.home))
        resp = conn.getresponse()
        assert resp.status == 200
        services: list[dict[str, Any]] = json.loads(resp.read())["services"]
        return services
    finally:
        conn.close()


def held(svc: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    """Replica id -> the GPUs it holds, for every replica holding some."""
    return {
        r["id"]: tuple(r["assignment"]["gpus"])
        for r in svc["replicas"]
        if r["assignment"] is not None and r["assignment"]["gpus"]
    }


def assert_disjoint(services: list[dict[str, Any]]) -> None:
    taken: dict[int, str] = {}
    for svc in services:
        for rid, gpus in held(svc).items():
            for gpu in gpus:
                owner = f"{svc['name']}/{rid}"
                assert gpu not in taken, f"GPU {gpu} held by {taken.get(gpu)} and {owner}"
                taken[gpu] = owner


def test_four_replicas_get_disjoint_pairs(box: tuple[Steady, Path]) -> None:
    steady, tmp = box
    steady.run("up", str(service_file(tmp, "gpu", replicas=4, message="v1")), "--wait")
    svc = steady.wait_for("gpu", lambda s: s["ready_replicas"] == 4, what="4 READY")
    pairs = held(svc)
    assert sorted(pairs.values()) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert_disjoint([svc])
    for rep in svc["replicas"]:
        gpus = ",".join(str(g) for g in rep["assignment"]["gpus"])
        assert rep["resources"] == f"1x Local(gpus={gpus})"
        assert rep["assignment"]["accelerator"] == "NVIDIA A100-SXM4-80GB"
        status, body = http_get(rep["port"], "/")
        seen = json.loads(body)
        assert status == 200 and seen["cuda_visible_devices"] == gpus
        assert seen["nvidia_visible_devices"] == gpus
    table = steady.run("status", "gpu").stdout
    assert "1x Local(gpus=0,1)" in table


def test_blue_green_on_the_full_box_is_refused_with_one_line(box: tuple[Steady, Path]) -> None:
    steady, tmp = box
    new = service_file(tmp, "gpu", replicas=4, message="v2")
    proc = steady.run("update", "gpu", str(new), "--mode", "blue_green", check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "blue_green needs room for 4 new replicas" in lines[0]
    assert "Insufficient nvidia.com/gpu" in lines[0] and "--mode rolling" in lines[0]
    svc = steady.service("gpu")
    assert svc["version"] == 1 and svc["update"] is None and svc["ready_replicas"] == 4


def test_rolling_update_of_the_full_box_never_shares_a_gpu(box: tuple[Steady, Path]) -> None:
    steady, tmp = box
    port = int(steady.service("gpu")["endpoint"].rsplit(":", 1)[1])
    load = LoadClient(port, max_seconds=90).start()
    samples = 0
    try:
        steady.run("update", "gpu", str(service_file(tmp, "gpu", replicas=4, message="v2")))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            services = api_status(steady)
            samples += 1
            assert_disjoint(services)
            update = next(s for s in services if s["name"] == "gpu")["update"]
            if update and update["status"] != "IN_PROGRESS":
                break
            time.sleep(0.02)
        else:
            pytest.fail("the rolling update did not finish within 90 s")
    finally:
        load.stop()
    assert update["status"] == "SUCCEEDED", update
    assert load.failed == 0 and load.sent > 0, load.summary()
    assert samples > 20
    svc = steady.wait_for("gpu", lambda s: len(s["replicas"]) == 4 and s["ready_replicas"] == 4)
    assert sorted(held(svc).values()) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert {r["version"] for r in svc["replicas"]} == {2}
    events = json.loads(steady.run("status", "gpu", "--events", "--json").stdout)
    reasons = [e["reason"] for e in events["services"][0]["events"]]
    assert any("no room on this machine for a surge" in r for r in reasons), reasons


def test_a_fifth_waits_pending_and_starts_when_one_stops(box: tuple[Steady, Path]) -> None:
    steady, tmp = box
    steady.run("up", str(service_file(tmp, "extra", replicas=1, message="x")))
    extra = steady.wait_for(
        "extra",
        lambda s: s["replicas"] and s["replicas"][0]["pending_reason"],
        what="a PENDING reason",
    )
    rep = extra["replicas"][0]
    assert rep["status"] == "PENDING" and rep["assignment"] is None
    assert rep["pending_reason"] == "Insufficient nvidia.com/gpu: needs A100:2 (A100: 0 of 8 free)"
    assert "is PENDING: Insufficient nvidia.com/gpu" in steady.run("status").stdout
    # One of gpu's replicas goes (an in-place scale-down): extra starts on its pair.
    steady.run("update", "gpu", str(service_file(tmp, "gpu", replicas=3, message="v2")))
    extra = steady.wait_for("extra", lambda s: s["ready_replicas"] == 1, what="extra READY")
    assert extra["replicas"][0]["pending_reason"] is None
    gpu = steady.wait_for("gpu", lambda s: len(s["replicas"]) == 3)
    assert_disjoint([gpu, extra])
    assert len(held(extra)[extra["replicas"][0]["id"]]) == 2


def test_controller_sigkill_keeps_every_assignment(box: tuple[Steady, Path]) -> None:
    steady, _ = box
    before = {name: steady.service(name) for name in ("gpu", "extra")}
    info = json.loads((steady.home / "controller.json").read_text())
    os.kill(info["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(info["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    after = {name: steady.service(name) for name in ("gpu", "extra")}  # restarts it
    new_info = json.loads((steady.home / "controller.json").read_text())
    assert new_info["pid"] != info["pid"]
    for name in before:
        assert held(after[name]) == held(before[name])
        assert {r["id"]: r["pid"] for r in after[name]["replicas"]} == {
            r["id"]: r["pid"] for r in before[name]["replicas"]
        }, steady.run("status", name, "--events", "--json").stdout[-6000:]
    assert_disjoint(list(after.values()))
