"""SkyPilot's own serve smoke tests, the ones that need no cloud, end to end here.

Source: repository skypilot-org/skypilot, path tests/smoke_tests/test_sky_serve.py,
commit 82c5151c8a20615ecb1c9fe805181b6ef296f251. Each ported scenario runs the
same task files (copies under ``files/``, laid out as SkyPilot's repository and
run from its root, each naming its source in its first line; ``files/SOURCES.md``
lists them) with the same checks: curl output, service and replica status,
replica counts, versions, update modes. ``sky serve up/update/status/logs/down``
is ``steady serve ...`` (docs/skyserve.md, "The CLI"), run from the files' root on
the local backend, one controller for the module. SkyPilot's files bind fixed
ports (8080, 8081, 9000), so every replica runs in a network namespace of its
own (docs/isolation.md: needs root, which CI has).

Every test function of the source file (29):

Ported (10): test_skyserve_user_bug_restart, test_skyserve_cancel,
test_skyserve_streaming, test_skyserve_readiness_timeout_fail,
test_skyserve_large_readiness_timeout, test_skyserve_update,
test_skyserve_rolling_update, test_skyserve_update_autoscale,
test_skyserve_failures, test_skyserve_https.

Left out (19), and why:

- test_skyserve_gcp_http, _aws_http, _azure_http, _kubernetes_http, _oci_http:
  each runs on its cloud (http/<cloud>.yaml); their scenario (2 replicas, curl)
  is the first half of test_skyserve_update here;
- test_skyserve_llm: a GPU and an LLM;
- test_skyserve_spot_recovery: spot, and a GCP VM deleted with gcloud;
- test_skyserve_base_ondemand_fallback: spot;
- test_skyserve_dynamic_ondemand_fallback: spot, GCP;
- test_skyserve_load_balancer: its replicas are told apart by their public IP
  (server.py asks ifconfig.me); on one machine all share one, which is why
  SkyPilot leaves it out on Kubernetes too. Round-robin order is SkyPilot's
  test_load_balancing_policies.py, ported beside this file;
- test_skyserve_auto_restart: GCP; its fault is a VM deleted with gcloud;
- test_skyserve_fast_update: its files' setup downloads server.py and clones
  SkyPilot's repository from GitHub;
- test_skyserve_new_autoscaler_update: spot (a use_spot mixture);
- test_skyserve_multi_ports: its setup downloads server.py from GitHub, and it
  curls the replica's own address, which an isolated replica has not on the host;
- test_user_dependencies: not serve (sky launch of a cluster);
- test_skyserve_ha_kill_after_ready, _during_provision, _during_pending,
  _during_shutdown: Kubernetes and GCP (a controller pod killed, VMs counted
  with gcloud).

Overrides, each because the scenario's point is not the length of a delay (the
whole file must run in about 90 s):

- update/new.yaml: replicas with an even id sleep 6 s, not 60, before starting:
  the point is a window in which both versions serve (rolling), or that no old
  answer comes once the new version serves (blue-green), not its length;
- failures/initial_delay.yaml: ``initial_delay_seconds`` 2, not 10: a replica that
  never listens is FAILED_INITIAL_DELAY when the delay ends, and not relaunched;
- failures/probing.yaml: ``service.health_check_period_s: 0.2`` (SteadyServe's
  probe period; SkyPilot probes every 10 s): the app answers 20 requests and then
  stops; probes use them up;
- readiness_timeout/task.yaml: ``initial_delay_seconds`` 5, not 120: every probe
  takes 20 s, past the 15 s timeout (both kept), so the replica fails when its
  delay is over.

SkyPilot's waits (``sleep 20`` after an update, ``sleep 60`` before checking that
nothing was relaunched, the load balancer's sync interval after READY) become
polls for the outcome: a status, the VERSION_BROKEN event after which nothing
of that version is launched, the load balancer routing. Where
SteadyServe names a state otherwise, the check says so (docs/skyserve.md,
"SkyPilot's smoke tests").

The files' ``setup: pip install ...`` runs as written, into the version's own
virtualenv (docs/environments.md; from PyPI, so these scenarios need the network
the isolated replicas reach through slirp4netns). On the client side,
``sky serve status --endpoint`` printed ``host:port`` at that commit and
send_streaming_request.py prefixes ``http://``, so it gets the endpoint without
its scheme; the keyfile of test_skyserve_https is written beside the files, not
in ``~``; SkyPilot's teardown (``sky serve down``) runs in the background, and
the module waits for it before its own ``down --all``. Every scenario's first
``sky serve up`` begins when the module starts, side by side (each scenario has
a service of its own), and each scenario goes on in turn from there.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from steadyserve.backends import netns
from steadyserve.client.connection import Client
from steadyserve.home.paths import Home
from tests.conftest import _steady_in
from tests.helpers.steady import Steady

FILES = Path(__file__).parent / "files"
pytestmark = pytest.mark.skipif(
    netns.unavailable() is not None, reason=f"no network isolation: {netns.unavailable()}"
)

LAUNCHING = ("PENDING", "PROVISIONING", "STARTING")
"""SkyPilot's _SERVICE_LAUNCHING_STATUS_REGEX (PROVISIONING, STARTING), with
PENDING, the state before them here."""


@dataclass
class Sky:
    """``steady serve`` run from the files' root, as ``sky serve`` from SkyPilot's."""

    steady: Steady
    root: Path
    downs: list[subprocess.Popen[str]] = field(default_factory=list)
    ups: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    first: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each scenario's first ``sky serve up`` arguments (:func:`first_ups`)."""

    def _background(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "steadyserve.cli", "serve", *args],
            cwd=self.root,
            env=self.steady.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def start(self, name: str, *args: str) -> None:
        """``sky serve up -n NAME -y ARGS`` begun now, for the scenario to take up later."""
        self.ups[name] = self._background("up", "-n", name, "-y", *args)

    def up(self, name: str, *args: str) -> None:
        """The scenario's ``sky serve up``: the one begun by the module, or now."""
        if name not in self.first:
            self.serve("up", "-n", name, "-y", *args)
            return
        assert args == self.first[name], (args, self.first[name])
        proc = self.ups.pop(name, None)
        if proc is None:  # taken up already (the module's first)
            return
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"serve up {name}: exit {proc.returncode}\n{err}"

    def serve(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "steadyserve.cli", "serve", *args],
            cwd=self.root,
            env=self.steady.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, f"serve {args}: exit {proc.returncode}\n{proc.stderr}"
        return proc

    def endpoint(self, name: str) -> str:
        return self.serve("status", "--endpoint", name).stdout.strip()

    def curl(self, url: str, *flags: str) -> str:
        proc = subprocess.run(
            ["curl", "-sS", "--max-time", "10", *flags, url],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.stdout + proc.stderr

    def python(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=self.root,
            env=self.steady.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def svc(self, name: str) -> dict[str, Any]:
        """What ``steady status NAME --json`` prints, read from the controller's API
        in this process: a poll every 0.1 s must not start a CLI each time."""
        client = Client(Home.from_env(self.steady.home))
        found: dict[str, Any] = client.call("GET", f"/api/v1/services?name={name}")["services"][0]
        return found

    def events(self, name: str) -> list[dict[str, Any]]:
        client = Client(Home.from_env(self.steady.home))
        found: list[dict[str, Any]] = client.call("GET", f"/api/v1/services/{name}/events")[
            "events"
        ]
        return found

    def until(
        self, name: str, check: Callable[[dict[str, Any]], bool], what: str, timeout: float = 40
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        svc: dict[str, Any] = {}
        while time.monotonic() < deadline:
            svc = self.svc(name)
            if check(svc):
                return svc
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}: {json.dumps(svc, indent=1)}")

    def wait_until_ready(self, name: str, replicas: int, timeout: float = 40) -> dict[str, Any]:
        """SkyPilot's _SERVE_WAIT_UNTIL_READY: REPLICAS ``n/n`` (ready/total); a FAILED
        service ends it."""

        def ready(svc: dict[str, Any]) -> bool:
            assert svc["status"] != "FAILED", svc
            return bool(svc["ready_replicas"] == svc["total_replicas"] == replicas)

        svc = self.until(name, ready, f"{replicas}/{replicas}", timeout)
        self.synced(name, timeout)
        return svc

    def synced(self, name: str, timeout: float) -> None:
        """SkyPilot then sleeps LB_CONTROLLER_SYNC_INTERVAL_SECONDS, so its load
        balancer has the ready replicas; here, poll until the load balancer routes
        (it no longer answers its own "no ready replica" 503)."""
        endpoint = self.endpoint(name)
        deadline = time.monotonic() + timeout
        while "no ready replica" in self.curl(f"{endpoint}/-/skysmoke-synced", "-k"):
            assert time.monotonic() < deadline, f"{name}: its load balancer routes nothing"
            time.sleep(0.1)

    def override(self, path: str, old: str, new: str) -> str:
        """A copy of ``path`` beside it with ``old`` replaced (the header's overrides)."""
        source = self.root / path
        text = source.read_text()
        assert old in text, (path, old)
        target = source.with_name(f"{source.stem}.short{source.suffix}")
        target.write_text(text.replace(old, new, 1))
        return str(target.relative_to(self.root))

    def down(self, name: str) -> None:
        """SkyPilot's _TEARDOWN_SERVICE, left running while the next scenario starts."""
        self.downs.append(self._background("down", name, "-y"))

    def downs_done(self) -> None:
        for proc in [*self.downs, *self.ups.values()]:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err


def count(svc: dict[str, Any], *statuses: str, version: int | None = None) -> int:
    """SkyPilot's _check_replica_in_status counts: replicas in one of ``statuses``."""
    return sum(
        1
        for r in svc["replicas"]
        if r["status"] in statuses and (version is None or r["version"] == version)
    )


def versions(svc: dict[str, Any]) -> str:
    """SkyPilot's _check_service_version: the VERSION column (``1,2`` mid-update),
    which ``steady serve status`` prints from ``active_versions``."""
    return ",".join(str(v) for v in svc["active_versions"])


def broken(sky: Sky, name: str) -> Callable[[dict[str, Any]], bool]:
    """The VERSION_BROKEN event: from then on nothing of that version is launched."""
    return lambda _svc: any(e["to_status"] == "VERSION_BROKEN" for e in sky.events(name))


def first_ups(sky: Sky) -> dict[str, tuple[str, ...]]:
    """Each scenario's first ``sky serve up`` (its overrides written, its TLS pair made)."""
    keyfile, certfile = tls_pair(sky.root, "ss-https")
    return {
        "ss-readiness-timeout-fail": (
            sky.override(
                "tests/skyserve/readiness_timeout/task.yaml",
                "initial_delay_seconds: 120",
                "initial_delay_seconds: 5",
            ),
        ),
        "ss-large-readiness-timeout": ("tests/skyserve/readiness_timeout/task_large_timeout.yaml",),
        "ss-update": ("tests/skyserve/update/old.yaml",),
        "ss-rolling-update": ("tests/skyserve/update/old.yaml",),
        "ss-update-autoscale": ("tests/skyserve/update/num_min_two.yaml",),
        "ss-user-bug-restart": ("tests/skyserve/restart/user_bug.yaml",),
        "ss-failures": (
            sky.override(
                "tests/skyserve/failures/initial_delay.yaml",
                "initial_delay_seconds: 10",
                "initial_delay_seconds: 2",
            ),
        ),
        "ss-cancel": ("tests/skyserve/cancel/cancel.yaml",),
        "ss-streaming": ("tests/skyserve/streaming/streaming.yaml",),
        "ss-https": (
            "tests/skyserve/https/service.yaml",
            "--env",
            f"TLS_KEYFILE_ENV_VAR={keyfile}",
            "--secret",
            f"TLS_CERTFILE_ENV_VAR={certfile}",
        ),
    }


def tls_pair(root: Path, name: str) -> tuple[Path, Path]:
    """SkyPilot's self-signed pair for test_skyserve_https (openssl, as it makes it)."""
    keyfile = root / f"test-skyserve-key-{name}.pem"
    certfile = root / "cert.pem"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "36500", "-nodes"]
    subprocess.run(
        [*openssl, "-subj", "/", "-keyout", str(keyfile), "-out", str(certfile)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return keyfile, certfile


@pytest.fixture(scope="module")
def sky() -> Iterator[Sky]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        root = Path(tmp) / "skypilot"
        shutil.copytree(FILES, root)
        for steady in _steady_in(Steady(home), home):
            cli = Sky(steady, root)
            # Every scenario's first ``sky serve up`` begins here, the first alone (it
            # starts the controller), the rest at once, so replicas, environments
            # and the 20 s probes of the readiness scenarios start side by side;
            # each scenario then takes its own up and goes on as SkyPilot's does.
            cli.first = first_ups(cli)
            (alone, args), *rest = cli.first.items()
            cli.start(alone, *args)
            cli.up(alone, *args)
            for name, args in rest:
                cli.start(name, *args)
            try:
                yield cli
            finally:
                cli.downs_done()
        assert netns.of_home(home.resolve()) == [], "namespaces left behind"


def test_skyserve_update(sky: Sky) -> None:
    """Blue-green: once the new version answers, no old answer comes."""
    name = "ss-update"
    new = sky.override("tests/skyserve/update/new.yaml", "sleep 60", "sleep 6")
    sky.up(name, "tests/skyserve/update/old.yaml")
    sky.wait_until_ready(name, 2)
    endpoint = sky.endpoint(name)
    assert "Hi, SkyPilot here" in sky.curl(endpoint)
    sky.serve("update", name, "--mode", "blue_green", "-y", new)
    deadline = time.monotonic() + 40
    while "Hi, new SkyPilot here!" not in sky.curl(endpoint):
        assert time.monotonic() < deadline, sky.svc(name)
        time.sleep(0.2)
    # Make sure the traffic is not mixed.
    assert all("Hi, new SkyPilot here" in sky.curl(endpoint) for _ in range(6))
    # The latest 2 are READY, the older ones shutting down (or already stopped).
    svc = sky.until(name, lambda s: count(s, "READY", version=2) == 2, "2 READY of version 2")
    assert count(svc, "READY", version=1) == 0, svc["replicas"]
    assert count(svc, "SHUTTING_DOWN", version=1) == len(
        [r for r in svc["replicas"] if r["version"] == 1]
    )
    sky.until(name, lambda s: s["active_versions"] == [2], "version 2 alone")
    assert versions(sky.svc(name)) == "2"
    sky.down(name)


def test_skyserve_rolling_update(sky: Sky) -> None:
    """Rolling: for a while one new and one old replica serve, round robin between them."""
    name = "ss-rolling-update"
    new = sky.override("tests/skyserve/update/new.yaml", "sleep 60", "sleep 6")
    sky.up(name, "tests/skyserve/update/old.yaml")
    sky.wait_until_ready(name, 2)
    endpoint = sky.endpoint(name)
    assert "Hi, SkyPilot here" in sky.curl(endpoint)
    sky.serve("update", name, "-y", new)
    deadline = time.monotonic() + 40
    while "Hi, new SkyPilot here!" not in sky.curl(endpoint):
        assert time.monotonic() < deadline, sky.svc(name)
        time.sleep(0.2)
    # One new replica READY (odd id), the even one still starting; one old READY,
    # one old shutting down (or already stopped).
    svc = sky.until(
        name,
        lambda s: count(s, "READY") == 2 and count(s, *LAUNCHING) == 1,
        "2 READY and 1 launching",
    )
    assert count(svc, "READY", version=1) == 1 and count(svc, "READY", version=2) == 1, svc
    assert versions(svc) == "1,2"
    # Right after a new answer, the old version answers (round robin), within two tries.
    first = sky.curl(endpoint)
    if "Hi, SkyPilot here" not in first:
        assert "Hi, new SkyPilot here!" in first, first
        assert "Hi, SkyPilot here" in sky.curl(endpoint)
    sky.down(name)


def test_skyserve_update_autoscale(sky: Sky) -> None:
    name = "ss-update-autoscale"
    sky.up(name, "tests/skyserve/update/num_min_two.yaml")
    assert versions(sky.wait_until_ready(name, 2)) == "1"
    endpoint = sky.endpoint(name)
    assert "Hi, SkyPilot here" in sky.curl(endpoint)
    sky.serve(
        "update", name, "--mode", "blue_green", "-y", "tests/skyserve/update/num_min_one.yaml"
    )
    sky.until(name, lambda s: s["version"] == 2 and s["update"]["status"] != "IN_PROGRESS", "v2")
    assert versions(sky.wait_until_ready(name, 1)) == "2"
    assert "Hi, SkyPilot here!" in sky.curl(endpoint)
    # Rolling update.
    sky.serve("update", name, "-y", "tests/skyserve/update/num_min_two.yaml")
    sky.until(name, lambda s: s["version"] == 3 and s["update"]["status"] != "IN_PROGRESS", "v3")
    assert versions(sky.wait_until_ready(name, 2)) == "3"
    assert "Hi, SkyPilot here!" in sky.curl(endpoint)
    sky.down(name)


def test_skyserve_user_bug_restart(sky: Sky) -> None:
    """A replica whose app exits is not restarted; an update that fixes it serves."""
    name = "ss-user-bug-restart"
    sky.up(name, "tests/skyserve/restart/user_bug.yaml")
    # SkyPilot shows SHUTTING_DOWN (its VM going away), then FAILED; here no VM, FAILED.
    svc = sky.until(name, lambda s: count(s, "FAILED") == 1, "the replica FAILED")
    # User bug failure will cause no further scaling.
    sky.until(name, broken(sky, name), "VERSION_BROKEN")
    svc = sky.svc(name)
    assert len(svc["replicas"]) == 1, svc["replicas"]
    assert svc["ready_replicas"] == 0
    # SkyPilot: the service NO_REPLICA, 0/0; SteadyServe says FAILED (its version is
    # broken) with 0 ready.
    assert svc["status"] == "FAILED", svc
    sky.serve("update", name, "-y", "tests/skyserve/auto_restart.yaml")
    endpoint = sky.endpoint(name)
    deadline = time.monotonic() + 40
    while "Hi, SkyPilot here" not in sky.curl(endpoint, "--connect-timeout", "10"):
        assert time.monotonic() < deadline, sky.svc(name)
        time.sleep(0.2)
    svc = sky.svc(name)
    assert count(svc, "READY") == 1, svc["replicas"]
    # SkyPilot still lists the FAILED replica of version 1; SteadyServe lists failed
    # replicas of the current version only, and keeps the old one's events.
    failed = [e for e in sky.events(name) if e["to_status"] == "FAILED" and e["replica_id"]]
    assert [e["replica_id"] for e in failed] == [1], failed
    sky.down(name)


def test_skyserve_failures(sky: Sky) -> None:
    """FAILED_INITIAL_DELAY, not relaunched; after an update, FAILED_PROBING and a new one."""
    name = "ss-failures"
    sky.up(name, *sky.first[name])  # initial_delay.yaml, its delay 2 s
    sky.until(name, lambda s: count(s, "FAILED_INITIAL_DELAY") == 1, "FAILED_INITIAL_DELAY")
    sky.until(name, broken(sky, name), "VERSION_BROKEN")
    svc = sky.svc(name)
    # Make sure no new replicas are started for early failure.
    assert len(svc["replicas"]) == 1, svc["replicas"]
    probing = sky.override(
        "tests/skyserve/failures/probing.yaml",
        "  replicas: 1\n",
        "  replicas: 1\n  health_check_period_s: 0.2\n",
    )
    sky.serve("update", name, "-y", probing)
    sky.until(name, lambda s: count(s, "READY") == 1, "READY")
    sky.until(name, lambda s: count(s, "FAILED_PROBING") == 1, "FAILED_PROBING")
    svc = sky.until(
        name,
        lambda s: count(s, "FAILED_PROBING") == 1 and count(s, *LAUNCHING, "READY") == 1,
        "1 FAILED_PROBING and 1 launching or READY",
    )
    sky.down(name)


def test_skyserve_cancel(sky: Sky) -> None:
    name = "ss-cancel"
    sky.up(name, "tests/skyserve/cancel/cancel.yaml")
    sky.wait_until_ready(name, 1)
    out = sky.python(
        "tests/skyserve/cancel/send_cancel_request.py", "--endpoint", sky.endpoint(name)
    )
    assert "Request was cancelled" in out, out
    deadline = time.monotonic() + 20
    logs = ""
    while "Client disconnected, stopping computation" not in logs:
        assert time.monotonic() < deadline, logs
        replica = sky.svc(name)["replicas"][0]["id"]
        logs = sky.serve("logs", name, str(replica), "--no-follow").stdout
        time.sleep(0.2)
    sky.down(name)


def test_skyserve_streaming(sky: Sky) -> None:
    name = "ss-streaming"
    sky.up(name, "tests/skyserve/streaming/streaming.yaml")
    sky.wait_until_ready(name, 1)
    endpoint = sky.endpoint(name).removeprefix("http://")
    sky.python("tests/skyserve/streaming/send_streaming_request.py", "--endpoint", endpoint)
    sky.down(name)


def test_skyserve_readiness_timeout_fail(sky: Sky) -> None:
    """Every probe takes 20 s, past its 15 s timeout: FAILED_INITIAL_DELAY, once."""
    name = "ss-readiness-timeout-fail"
    sky.up(name, *sky.first[name])  # readiness_timeout/task.yaml, its delay 5 s
    sky.until(
        name, lambda s: count(s, "FAILED_INITIAL_DELAY") == 1, "FAILED_INITIAL_DELAY", timeout=60
    )
    sky.until(name, broken(sky, name), "VERSION_BROKEN")
    svc = sky.svc(name)
    assert len(svc["replicas"]) == 1 and count(svc, "FAILED_INITIAL_DELAY") == 1, svc
    sky.down(name)


def test_skyserve_large_readiness_timeout(sky: Sky) -> None:
    """A 30 s probe timeout lets the 20 s probe pass."""
    name = "ss-large-readiness-timeout"
    sky.up(name, "tests/skyserve/readiness_timeout/task_large_timeout.yaml")
    sky.wait_until_ready(name, 1, timeout=60)
    assert "Hi, SkyPilot here" in sky.curl(sky.endpoint(name))
    sky.down(name)


def test_skyserve_https(sky: Sky) -> None:
    """TLS from files named by --env and --secret: HTTPS works with -k, the self-signed
    certificate is refused without it, plain HTTP gets an empty reply."""
    name = "ss-https"
    # https/service.yaml --env TLS_KEYFILE_ENV_VAR=... --secret TLS_CERTFILE_ENV_VAR=...
    sky.up(name, *sky.first[name])
    sky.wait_until_ready(name, 1)
    endpoint = sky.endpoint(name)
    assert "Hi, SkyPilot here" in sky.curl(endpoint, "-k")
    # Self signed certificate should fail without -k.
    assert re.search(r"self[ -]signed certificate", sky.curl(endpoint)), sky.curl(endpoint)
    # curl with wrong schema (http) should fail.
    http_endpoint = endpoint.replace("https:", "http:", 1)
    assert "Empty reply from server" in sky.curl(http_endpoint)
    sky.down(name)
