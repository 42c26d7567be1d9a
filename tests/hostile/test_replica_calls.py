"""Another local user connects straight to a Python replica's app port (a loopback
port anyone may reach) and tries the handle-call path: without the home's graph
secret nothing runs, and ``reconfigure`` is never a handle's to call.

Before the fix, a JSON frame naming ``reconfigure`` changed what the endpoint
answered (only pickle needed the secret).
"""

from __future__ import annotations

import http.client
from pathlib import Path

from steadyserve.serve import wire
from tests.replica._proc import HOST, Replica

MODULE = """
from steadyserve import serve

@serve.deployment(user_config={"message": "hello"})
class Greeter:
    def __init__(self):
        self.message = "unset"

    def reconfigure(self, config):
        self.message = config["message"]

    def __call__(self, request=None):
        return self.message

app = Greeter.bind()
"""
SECRET = "the-home-graph-secret"


def call(port: int, method: str, args: list[object], headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request(
            "POST",
            wire.CALL_PATH,
            body=wire.encode({"args": args, "kwargs": {}}, allow_pickle=False),  # JSON
            headers={wire.METHOD_HEADER: method, "Content-Type": wire.CONTENT_TYPE, **headers},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_a_local_user_cannot_reconfigure_a_replica_through_its_call_path(tmp_path: Path) -> None:
    (tmp_path / "greeter_mod.py").write_text(MODULE)
    env = {"STEADY_GRAPH_SECRET": SECRET}
    with Replica(tmp_path, "greeter_mod:app", env, log_dir=tmp_path) as replica:
        replica.wait_health(200)
        before = replica.app("/")
        for headers in ({}, {wire.GRAPH_SECRET_HEADER: "guess"}):
            status, body = call(replica.port, "reconfigure", [{"message": "PWNED"}], headers)
            assert status == 403, body
            status, body = call(replica.port, "__call__", [], headers)
            assert status == 403, body
        # Even a caller with the secret (another replica of the home) cannot drive a
        # lifecycle hook: the controller owns reconfigure and check_health.
        trusted = {wire.GRAPH_SECRET_HEADER: SECRET}
        for method in ("reconfigure", "check_health"):
            status, body = call(replica.port, method, [{"message": "PWNED"}], trusted)
            assert status == 404, body
        assert replica.app("/") == before
        assert b"PWNED" not in replica.app("/")[1]
