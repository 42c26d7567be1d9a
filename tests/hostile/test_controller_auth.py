"""Another local user must not be able to drive the controller (docs/security.md).

A real controller, started by the home's owner with no STEADY_TOKEN, serves one
service; requests come from uid 65534 (``setpriv``), from the owner with a wrong
token, with the replicas' routes-only token, and from a browser's dashboard cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from steadyserve.spec import load_service_file
from tests.helpers.steady import EXAMPLES, Steady, api_headers, api_secret, processes_of_home

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
STEP_S = 10.0

SERVICE = f"""\
name: web
service:
  readiness_probe: /health
  replicas: 1
  health_check_period_s: 0.2
  graceful_shutdown_wait_loop_s: 0.05
  graceful_shutdown_timeout_s: 2
workdir: {EXAMPLES / "http_server"}
run: python3 server.py
"""


@dataclass
class Owned:
    steady: Steady
    home: Path
    url: str
    scratch: Path

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        """One request as the owner; redirects are not followed."""
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(str(parts.hostname), parts.port, timeout=STEP_S)
        try:
            conn.request(method, path, body=body or None, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def as_nobody(self, *argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*NOBODY, *argv], input=stdin, capture_output=True, timeout=STEP_S, check=False
        )

    def curl_as_nobody(self, method: str, path: str, body: bytes = b"", *headers: str) -> int:
        """The status code uid 65534 gets (curl prints only the code)."""
        args = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method]
        for header in headers:
            args += ["-H", header]
        if body:
            args += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        proc = self.as_nobody(*args, self.url + path, stdin=body)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout)


def _no_token_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "STEADY_TOKEN"}


@pytest.fixture(scope="module")
def owned() -> Iterator[Owned]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("curl") is None:
        pytest.skip("needs root, setpriv and curl to act as another local user")
    scratch = Path(tempfile.mkdtemp(prefix="steady-auth-"))
    scratch.chmod(0o711)  # others may pass through, so only the home's own mode keeps them out
    home = scratch / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("STEADY_TOKEN", raising=False)  # the documented default
        steady = Steady(home)
        spec = scratch / "web.yaml"
        spec.write_text(SERVICE)
        try:
            steady.run("up", str(spec), "--wait", timeout=60)
            url = json.loads((home / "controller.json").read_text())["url"]
            yield Owned(steady, home, url, scratch)
        finally:
            steady.run("down", "--all", check=False, timeout=60)
            steady.run("controller", "stop", check=False, timeout=30)
            deadline = time.monotonic() + 10
            while (left := processes_of_home(home)) and time.monotonic() < deadline:
                time.sleep(0.1)
            for proc in left:
                proc.kill()
            shutil.rmtree(scratch, ignore_errors=True)


def _service_body(owned: Owned, name: str, proof: Path) -> bytes:
    """A valid create call whose replica would write ``proof`` as the owner."""
    path = owned.scratch / f"{name}.yaml"
    path.write_text(f"name: {name}\nservice:\n  replicas: 1\nrun: id > {proof}; exec sleep 600\n")
    spec = load_service_file(path)
    return json.dumps({"spec": spec.spec_json(), "yaml": path.read_text()}).encode()


def _names(owned: Owned) -> set[str]:
    return {s["name"] for s in owned.steady.status()["services"]}


def test_another_local_user_gets_401_and_changes_nothing(owned: Owned) -> None:
    proof = owned.scratch / "proof.txt"
    body = _service_body(owned, "pwned", proof)
    assert owned.curl_as_nobody("POST", "/api/v1/services", body) == 401
    assert owned.curl_as_nobody("POST", "/api/v1/deploy", b'{"services": []}') == 401
    assert owned.curl_as_nobody("DELETE", "/api/v1/services/web") == 401
    assert owned.curl_as_nobody("POST", "/api/v1/services/web/rollback", b"{}") == 401
    assert owned.curl_as_nobody("POST", "/api/v1/shutdown", b"{}") == 401
    assert owned.curl_as_nobody("GET", "/api/v1/services") == 401
    assert owned.curl_as_nobody("GET", "/api/v1/health") == 401
    assert owned.curl_as_nobody("GET", "/api/v1/dashboard") == 401
    # Refused before any handler ran: the service list is what it was, the
    # controller still answers, and no replica of the refused service ever ran.
    svc = owned.steady.service("web")
    assert _names(owned) == {"web"}
    assert svc["status"] == "READY" and svc["version"] == 1
    assert not proof.exists()
    # Read-only and documented as open without STEADY_TOKEN: Prometheus scrapes it.
    assert owned.curl_as_nobody("GET", "/metrics") == 200


def test_another_local_user_cannot_read_the_key_or_the_home(owned: Owned) -> None:
    key = owned.home / "control.key"
    assert stat.S_IMODE(owned.home.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    listing = owned.as_nobody("ls", str(owned.home))
    assert listing.returncode != 0 and b"Permission denied" in listing.stderr
    reading = owned.as_nobody("cat", str(key))
    assert reading.returncode != 0 and b"Permission denied" in reading.stderr
    assert api_secret(owned.home).encode() not in reading.stdout


def test_a_wrong_or_missing_token_is_401(owned: Owned) -> None:
    secret = api_secret(owned.home)
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {secret}x"},
        {"Authorization": secret},  # not a bearer header
        {"Authorization": f"Bearer {hashlib.sha256(secret.encode()).hexdigest()}"},
    ):
        status, _, body = owned.request("GET", "/api/v1/services", headers)
        assert status == 401, (headers, body)
        assert json.loads(body)["kind"] == "unauthorized"
        status, _, _ = owned.request("POST", "/api/v1/shutdown", headers, b"{}")
        assert status == 401
    # Public routes are public by the route they resolve to, not by a path prefix.
    for path in (
        "/dashboard/../api/v1/services",
        "/dashboard/%2e%2e/api/v1/services",
        "/dashboard/static/..%2f..%2fapi%2fv1%2fservices",
        "/dashboard/login/../../api/v1/services",
        "//api/v1/services",
        "/API/v1/services",
    ):
        status, _, body = owned.request("GET", path)
        assert status in (401, 404), (path, status, body)
        assert b'"web"' not in body, path
    # The right one, derived from control.key as docs/security.md says, works.
    status, _, body = owned.request("GET", "/api/v1/services", api_headers(owned.home))
    assert status == 200, body
    assert [s["name"] for s in json.loads(body)["services"]] == ["web"]


def test_the_routes_token_reads_routes_and_nothing_else(owned: Owned) -> None:
    key = bytes.fromhex((owned.home / "control.key").read_text().strip())
    routes = {
        "Authorization": f"Bearer {hmac.new(key, b'routes-read', hashlib.sha256).hexdigest()}"
    }
    status, _, body = owned.request("GET", "/api/v1/lb/web/routes?wait=0", routes)
    assert status == 200, body
    assert [r["id"] for r in json.loads(body)["replicas"]] == [1]
    # It may ask which service hosts an application's ingress (serve.get_app_handle
    # inside a replica): "web" is no application, so 404, as for one that is not there.
    for app in ("web", "nope"):
        status, _, body = owned.request("GET", f"/api/v1/apps/{app}/ingress", routes)
        assert status == 404 and json.loads(body)["error"] == f"Application '{app}' does not exist."
    assert owned.request("GET", "/api/v1/apps/web/ingress")[0] == 401
    report = json.dumps({"table": "", "inflight": {"1": 99}}).encode()
    for method, path, data in (
        ("GET", "/api/v1/services", b""),
        ("GET", "/api/v1/health", b""),
        ("GET", "/api/v1/gateway/routes?wait=0", b""),
        ("GET", "/api/v1/dashboard", b""),
        ("POST", "/api/v1/lb/web/report", report),
        ("POST", "/api/v1/services/web/rollback", b"{}"),
        ("POST", "/api/v1/dashboard/codes", b"{}"),
        ("DELETE", "/api/v1/services/web", b""),
        ("POST", "/api/v1/gateway", b'{"port": 8000}'),
        ("DELETE", "/api/v1/gateway", b""),
        ("POST", "/api/v1/shutdown", b"{}"),
    ):
        status, _, body = owned.request(method, path, routes, data)
        assert status == 401, (method, path, status, body)
    assert _names(owned) == {"web"}


def test_the_dashboard_link_works_once_and_sets_an_httponly_cookie(owned: Owned) -> None:
    link = owned.steady.run("dashboard", "--no-browser").stdout.strip()
    parts = urlsplit(link)
    assert parts.path == "/dashboard/login" and parts.query.startswith("code="), link
    assert api_secret(owned.home) not in link  # a browser's command line is world-readable
    target = f"{parts.path}?{parts.query}"

    status, headers, _ = owned.request("GET", target)
    assert status == 303 and headers["Location"] == "/dashboard/", (status, headers)
    cookie = SimpleCookie(headers["Set-Cookie"])
    (name,) = cookie.keys()
    morsel = cookie[name]
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Strict"
    assert morsel["path"] == "/api/v1/dashboard"
    assert morsel.value not in (api_secret(owned.home), parts.query.removeprefix("code="))
    session = {"Cookie": f"{name}={morsel.value}"}

    status, _, body = owned.request("GET", "/api/v1/dashboard", session)
    assert status == 200, body
    assert [s["name"] for s in json.loads(body)["services"]] == ["web"]
    assert owned.request("GET", "/api/v1/dashboard/timeseries", session)[0] == 200
    # The cookie reads the page's data and does nothing else.
    assert owned.request("GET", "/api/v1/services", session)[0] == 401
    assert owned.request("POST", "/api/v1/dashboard/codes", session, b"{}")[0] == 401
    assert owned.request("POST", "/api/v1/shutdown", session, b"{}")[0] == 401

    # A used code is spent: no second cookie, from anyone.
    status, headers, _ = owned.request("GET", target)
    assert status == 401 and "Set-Cookie" not in headers, (status, headers)
    assert owned.request("GET", "/dashboard/login?code=guess")[0] == 401
    assert owned.request("GET", "/dashboard/")[0] == 200  # the static page holds no data


def test_the_owner_needs_no_token(owned: Owned) -> None:
    """The README's commands as the home's owner with no STEADY_TOKEN: the CLI and
    the load balancer authenticate with the home's secret, raw calls do not."""
    env = dict(_no_token_env(), STEADY_HOME=str(owned.home))
    out = subprocess.run(
        [sys.executable, "-m", "steadyserve.cli", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=owned.scratch,
    )
    assert out.returncode == 0, out.stderr
    assert [s["name"] for s in json.loads(out.stdout)["services"]] == ["web"]
    port = int(json.loads(out.stdout)["services"][0]["endpoint"].rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=STEP_S)
    try:  # served: the load balancer follows its table with the home's secret
        conn.request("GET", "/")
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert owned.request("GET", "/api/v1/services")[0] == 401
