"""What the controller and the load balancer read from a replica in its own network
namespace, beyond probes and ``user_config``: a Python runner's own ongoing count
(the autoscaler's ``/-/info``) and a ``replica_metrics`` scrape. Both connect inside
the namespace; the same port on the host's loopback answers something else, so a
read that stayed outside would be seen."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from tests.helpers.own_count import read_own_count

from steadyserve.backends import netns
from steadyserve.controller.load import CountTarget
from steadyserve.lb.replica_metrics import fetch

pytestmark = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))

SERVER = """
import http.server, sys
body = sys.argv[2].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("up", flush=True)
server.timeout = 0.5
for _ in range(120):
    server.handle_request()
"""


def serve(command: list[str], port: int, body: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*command, sys.executable, "-c", SERVER, str(port), body], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A namespace whose 127.0.0.1:PORT answers ``inside``; the host's, ``outside``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    name = netns.name_for(tmp_path, "reach", 1)
    netns.create(name, tmp_path / "slirp.log")
    inside = serve(netns.exec_command(name, []), port, '{"ongoing_requests": 7, "m": 1}')
    outside = serve([], port, '{"ongoing_requests": 99}')
    try:
        yield name, port
    finally:
        for proc in (inside, outside):
            proc.kill()
            proc.wait()
        netns.remove(name)


def test_the_runners_own_count_is_read_inside_its_namespace(replica: tuple[str, int]) -> None:
    name, port = replica

    async def read(netns_name: str | None) -> float | None:
        async with aiohttp.ClientSession() as session:
            return await read_own_count(session, CountTarget(1, "127.0.0.1", port, {}, netns_name))

    assert asyncio.run(read(name)) == 7.0
    assert asyncio.run(read(None)) == 99.0  # the host's loopback: another process


def test_a_replica_metrics_scrape_is_made_inside_its_namespace(replica: tuple[str, int]) -> None:
    name, port = replica
    inside = asyncio.run(fetch("127.0.0.1", port, "/metrics", 5.0, netns.path_of(name)))
    assert '"ongoing_requests": 7' in inside
