"""SkyServe task files, run from the directory a SkyServe user runs them from.

The files under ``tree/`` mirror the fields and layout of SkyServe's published
examples (http_server, its update test, load-balancing policies, min_replicas
zero, a readiness probe with a timeout, streaming, an LLM with accelerators,
TLS). Each test copies the tree to a temporary "repository root" and runs the
real ``steady`` there, so ``workdir: examples/serve/http_server`` resolves from
the current directory, as ``sky serve up`` does.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.steady import Steady, http_get

TREE = Path(__file__).parent / "tree"
UP_TIMEOUT = "90"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    dest = tmp_path / "skypilot"
    shutil.copytree(TREE, dest)
    return dest


def sky(
    steady: Steady, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``steady ARGS`` run from ``cwd`` (the CLI of this worktree, this test's home)."""
    return subprocess.run(
        [sys.executable, "-m", "steadyserve.cli", *args],
        cwd=cwd,
        env={**steady.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def endpoint_port(svc: dict[str, object]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_http_server_and_its_neighbours_run_from_the_repository_root(
    steady: Steady, root: Path
) -> None:
    up = ok(
        sky(
            steady,
            root,
            "up",
            "examples/serve/http_server/task.yaml",
            "--wait",
            "--timeout",
            UP_TIMEOUT,
        )
    )
    workdir = (root / "examples/serve/http_server").resolve()
    assert (
        f"note: workdir: examples/serve/http_server resolved from the current directory: {workdir}"
        in up.stderr
    )
    assert "note: resources.ports: replicas listen on $PORT (run uses it)" in up.stderr
    svc = steady.service("http-server")
    assert svc["ready_replicas"] == 2 and svc["load_balancing_policy"] == "round_robin"
    port = endpoint_port(svc)
    answers = {http_get(port, "/")[1] for _ in range(6)}
    assert answers == {b"Hi, SkyServe here! replica 1\n", b"Hi, SkyServe here! replica 2\n"}

    # Two files from one folder (examples/serve): the second gets a name of its own.
    ok(sky(steady, root, "up", "examples/serve/min_replicas_zero.yaml"))
    second = ok(sky(steady, root, "up", "examples/serve/readiness_timeout.yaml", "--json"))
    created = json.loads(second.stdout)
    assert created["name"].startswith("sky-service-") and len(created["name"]) == 16
    assert f"note: name: serve is taken, so this service is {created['name']}" in second.stderr
    ok(sky(steady, root, "up", "-n", "lb", "examples/serve/load_balancing_policies_example.yaml"))
    ok(sky(steady, root, "up", "-n", "stream", "examples/serve/streaming/service.yaml", "--wait"))
    for name in (created["name"], "lb"):
        steady.wait_for(name, lambda s: s["status"] == "READY", timeout=60, what=f"{name} READY")
    assert steady.service("serve")["target_replicas"] == 0

    conn = http.client.HTTPConnection(
        "127.0.0.1", endpoint_port(steady.service("stream")), timeout=10
    )
    conn.request("GET", "/generate")
    response = conn.getresponse()
    assert response.status == 200
    assert response.read() == b"".join(f"chunk {i}\n".encode() for i in range(5))
    conn.close()


def test_single_replica_files_with_their_fixed_port_run_as_they_are(
    steady: Steady, root: Path
) -> None:
    """SkyServe's streaming and readiness-timeout files bind 8080 themselves
    (``--port 8080``): probed (a POST probe too) and routed on 8080, in a network
    namespace of the replica's own where the machine gives one, else on the host."""
    for path in ("examples/serve/streaming/service.yaml", "examples/serve/readiness_timeout.yaml"):
        file = root / path
        file.write_text(file.read_text().replace("--port $PORT", "--port 8080"))
    ok(sky(steady, root, "up", "-n", "stream", "examples/serve/streaming/service.yaml", "--wait"))
    ok(sky(steady, root, "up", "-n", "slow", "examples/serve/readiness_timeout.yaml", "--wait"))
    for name in ("stream", "slow"):
        assert [r["port"] for r in steady.service(name)["replicas"]] == [8080]
    conn = http.client.HTTPConnection(
        "127.0.0.1", endpoint_port(steady.service("stream")), timeout=10
    )
    conn.request("GET", "/generate")
    response = conn.getresponse()
    assert response.status == 200
    assert response.read() == b"".join(f"chunk {i}\n".encode() for i in range(5))
    conn.close()
    assert http_get(endpoint_port(steady.service("slow")), "/")[0] == 200


def test_update_example_rolls_old_to_new(steady: Steady, root: Path) -> None:
    up = ok(
        sky(
            steady,
            root,
            "up",
            "-n",
            "update-test",
            "tests/skyserve/update/old.yaml",
            "--wait",
            "--timeout",
            UP_TIMEOUT,
        )
    )
    assert "note: resources.cloud: not applicable to the local backend" in up.stderr
    port = endpoint_port(steady.service("update-test"))
    assert http_get(port, "/")[1] == b"old"
    events = json.loads(ok(sky(steady, root, "status", "update-test", "--events", "--json")).stdout)
    named = [
        e["reason"] for e in events["services"][0]["events"] if e["to_status"] == "NOT_APPLICABLE"
    ]
    assert named == [
        "resources.cloud: not applicable to the local backend (replicas run on this machine);"
        " ignored",
        "resources.ports: replicas listen on $PORT (run uses it); the endpoint is the load"
        " balancer's port",
    ]
    ok(
        sky(
            steady,
            root,
            "update",
            "update-test",
            "tests/skyserve/update/new.yaml",
            "--wait",
            "--timeout",
            UP_TIMEOUT,
        )
    )
    assert {http_get(port, "/")[1] for _ in range(4)} == {b"new"}


def test_tls_endpoint_serves_https_with_the_given_certificate(steady: Steady, root: Path) -> None:
    folder = root / "examples/serve/https"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(folder / "key.pem"),
            "-out",
            str(folder / "cert.pem"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    up = ok(
        sky(
            steady,
            root,
            "up",
            "-n",
            "https",
            "examples/serve/https/service.yaml",
            "--wait",
            "--timeout",
            UP_TIMEOUT,
        )
    )
    assert "is starting at https://127.0.0.1:" in up.stdout
    port = endpoint_port(steady.service("https"))
    context = ssl.create_default_context(cafile=str(folder / "cert.pem"))
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    conn.request("GET", "/")
    response = conn.getresponse()
    assert response.status == 200 and response.read().startswith(b"Hi, SkyServe here!")
    conn.close()
    untrusted = http.client.HTTPSConnection(
        "127.0.0.1", port, timeout=10, context=ssl.create_default_context()
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        untrusted.request("GET", "/")
    untrusted.close()


def test_what_this_machine_cannot_run_is_refused_in_one_line(steady: Steady, root: Path) -> None:
    # Two fixed-port replicas run, each in a network namespace of its own, where the
    # machine gives one (tests/e2e/test_isolation.py); with isolation off they cannot.
    path = root / "examples/serve/http_server/fixed_port.yaml"
    path.write_text(path.read_text().replace("  replicas: 2", "  replicas: 2\n  isolation: none"))
    fixed = sky(steady, root, "up", "examples/serve/http_server/fixed_port.yaml")
    assert fixed.returncode == 2
    assert fixed.stderr.splitlines() == [
        "error: examples/serve/http_server/fixed_port.yaml: resources.ports: run does not use"
        " $PORT, so every replica would bind port 8080, and this machine holds one replica per"
        " fixed port (service.isolation is none; asked for 2): make the app listen on $PORT"
        " (e.g. --port $PORT; see docs/skyserve.md and docs/isolation.md)"
    ]
    no_secret = sky(steady, root, "up", "llm/vllm/service.yaml", env={"HF_TOKEN": ""})
    assert no_secret.returncode == 2
    assert "secrets.HF_TOKEN: no value" not in no_secret.stderr  # "" is a value
    gpu = sky(steady, root, "up", "llm/vllm/service.yaml", env={"HF_TOKEN": "hf_x"})
    assert gpu.returncode == 2
    if shutil.which("nvidia-smi") is None:
        assert gpu.stderr.splitlines() == [
            "error: llm/vllm/service.yaml: resources.accelerators: asks for A100:1, this machine"
            " has no GPU (nvidia-smi -L found none); pass --ignore-resources to start it anyway"
        ]


def test_a_replica_on_a_fixed_port_is_named_in_status(steady: Steady, root: Path) -> None:
    path = root / "tests/skyserve/update/fixed_port_one.yaml"
    fixed = free_port()
    path.write_text(path.read_text().replace("$FIXED", str(fixed)))
    ok(sky(steady, root, "up", "-n", "fixed", "tests/skyserve/update/fixed_port_one.yaml"))
    svc = steady.wait_for(
        "fixed",
        lambda s: any(r.get("notice") for r in s["replicas"]),
        timeout=60,
        what="a fixed-port notice",
    )
    replica = svc["replicas"][0]
    expected = (
        f"replica {replica['id']} listens on {fixed}, not on its $PORT {replica['port']}:"
        " use --port $PORT; see docs/skyserve.md"
    )
    assert replica["notice"] == expected
    assert f"fixed: {expected}" in ok(sky(steady, root, "status", "fixed")).stdout
    events = ok(sky(steady, root, "status", "fixed", "--events", "--json")).stdout
    assert any(
        e["to_status"] == "WRONG_PORT" and e["reason"] == expected
        for e in json.loads(events)["services"][0]["events"]
    )


def test_secrets_reach_the_replica_and_nothing_steady_prints(steady: Steady, root: Path) -> None:
    value = "hf_compat_secret_value"
    up = ok(
        sky(
            steady,
            root,
            "up",
            "-n",
            "sec",
            "examples/serve/http_server/secrets.yaml",
            "--wait",
            "--timeout",
            UP_TIMEOUT,
        )
    )
    logs = ok(sky(steady, root, "logs", "sec", "1")).stdout
    assert "token is ****" in logs and value not in logs
    path = root / "examples/serve/http_server/secrets.yaml"
    path.write_text(path.read_text().replace(value, "hf_other_secret_value"))
    plan = ok(
        sky(steady, root, "update", "sec", "examples/serve/http_server/secrets.yaml", "--dry-run")
    )
    assert "secrets.HF_TOKEN" in plan.stdout
    status = ok(sky(steady, root, "status", "sec", "--json", "--events"))
    history = ok(sky(steady, root, "history", "sec", "--json"))
    for shown in (up.stdout, up.stderr, plan.stdout, plan.stderr, status.stdout, history.stdout):
        assert value not in shown and "hf_other_secret_value" not in shown


def test_a_crash_before_ready_shows_its_output_with_secrets_masked(
    steady: Steady, tmp_path: Path
) -> None:
    """The FAILED event and ``up --wait`` quote the replica's last output, with
    the service's secrets masked there as in ``steady logs``."""
    value = "hf_crash_secret_value"
    path = tmp_path / "crash.yaml"
    path.write_text(
        "name: crash\nservice:\n  readiness_probe: /\n  replicas: 1\n"
        f"secrets:\n  HF_TOKEN: {value}\nrun: echo token is $HF_TOKEN; exit 3\n"
    )
    up = steady.run("up", str(path), "--wait", "--timeout", "60", check=False)
    assert up.returncode == 1, up.stderr
    assert "exited with code 3 before it was ready; its last output: token is ****" in up.stderr
    events = steady.run("status", "crash", "--events", "--json").stdout
    assert "its last output: token is ****" in events
    for shown in (up.stdout, up.stderr, events):
        assert value not in shown


def test_local_file_mounts_are_copied_into_the_replica_directory(
    steady: Steady, root: Path
) -> None:
    up = ["up", "-n", "mounts", "examples/serve/file_mounts.yaml", "--wait"]
    ok(sky(steady, root, *up, "--timeout", UP_TIMEOUT))
    assert "hello from a file mount" in ok(sky(steady, root, "logs", "mounts", "1")).stdout
    (root / "examples/serve/greeting.txt").write_text("changed\n")
    plan = ok(sky(steady, root, "update", "mounts", "examples/serve/file_mounts.yaml", "--dry-run"))
    assert "workdir" in plan.stdout and "restart" in plan.stdout
