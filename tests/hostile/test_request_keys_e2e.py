"""Bodies, headers and cookies built to break a request-aware policy, through a
real load balancer capped at 50 connections: each gets an answer, the LB keeps no
socket of theirs, and a normal request after 1,000 of them is served.

Before the fix, ``{"user": "\\ud800"}`` (18 bytes) and 30,000 ``[`` each left a
socket in CLOSE_WAIT for good: 60 of them made every later request a 503.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from _lb_helpers import FakeController, LBProcess, Upstream, request, wait_for

from steadyserve.core.routing.options import PolicyOptions
from steadyserve.wire.routes import options_to_json

HOSTILE_BODIES = [
    b'{"user": "\\ud800"}',
    b"[" * 30000,
    b'{"user": ' + b"[" * 30000 + b"}",
    b'{"user": "\\udfff", "messages": [' * 200,
    b'{"user": "' + b"\\" * 3001 + b'"}',
    b"\xff\xfe{not json",
    b'{"messages": "' + b"\\ud800" * 500 + b'"}',
]
HOSTILE_HEADERS = [
    {"X-Session-ID": "\udcff"},
    {"Cookie": "sid=" + "\\" * 200 + "; sid"},
    {"serve_multiplexed_model_id": "\x00\x7f"},
    {"Cookie": ";;;=;sid==;"},
]
ROUTES = [
    ("session_affinity", "json:/user"),
    ("session_affinity", "header:X-Session-ID"),
    ("session_affinity", "cookie:sid"),
    ("prefix_affinity", None),
]


def client_sockets(pid: int, port: int) -> int:
    """The LB's sockets to clients (its pooled replica connections are not counted:
    they idle out on their own). A hung request shows here as CLOSE_WAIT."""
    conns = psutil.Process(pid).net_connections("tcp")
    return sum(1 for c in conns if c.laddr.port == port and c.status != psutil.CONN_LISTEN)


def send(port: int, body: bytes, headers: dict[str, str]) -> int:
    """One request on its own connection; the status the LB answered."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("utf-8", "surrogateescape")
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    head += extra + b"Content-Length: %d\r\n\r\n" % len(body)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + body)
        answer = http.client.HTTPResponse(s)
        answer.begin()  # read by its framing: the LB may linger before it closes
        answer.read()
        return answer.status


@pytest.fixture(scope="module")
def capped(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FakeController, LBProcess, list[Upstream]]]:
    home = tmp_path_factory.mktemp("home")
    with Upstream("a") as a, Upstream("b") as b, FakeController(home) as ctl, LBProcess(home) as lb:
        yield ctl, lb, [a, b]


def test_a_thousand_hostile_requests_leave_the_lb_serving(
    capped: tuple[FakeController, LBProcess, list[Upstream]],
) -> None:
    ctl, lb, ups = capped
    rng = random.Random(39)
    statuses: Counter[int] = Counter()
    sent = 0
    for policy, key in ROUTES:
        extra = {
            "policy_options": options_to_json(PolicyOptions(affinity_key=key)),
            "load_balancer": {"max_connections": 50},
        }
        version = ctl.set_table([(1, ups[0].port), (2, ups[1].port)], policy=policy, extra=extra)
        wait_for(lambda v=version: v in ctl.polls, what="LB has the table")
        assert request(lb.port, "GET", "/echo")[0] == 200
        cases = [
            (rng.choice(HOSTILE_BODIES), rng.choice([*HOSTILE_HEADERS, {}])) for _ in range(250)
        ]
        with ThreadPoolExecutor(32) as pool:  # 32 at once, under the cap of 50
            statuses.update(pool.map(lambda case: send(lb.port, *case), cases))
        sent += len(cases)
        status, _, data = request(lb.port, "POST", "/echo", body=json.dumps({"user": "u"}).encode())
        assert status == 200, data
        wait_for(
            lambda: client_sockets(lb.proc.pid, lb.port) == 0,
            what="no client socket left open in the LB",
        )
    assert sent == 1000
    # Every one answered: routed (without a key if need be), or 400 for a header
    # no HTTP parser accepts (a NUL byte); never a 5xx, never a hung socket.
    assert set(statuses) <= {200, 400} and statuses[200] >= 750, statuses
    assert "Traceback" not in lb.log()
