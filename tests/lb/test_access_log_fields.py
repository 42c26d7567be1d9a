"""The request log says who called (client, user agent) and under which id, when
(ISO-8601 UTC beside the Unix time), and the id travels: the client's valid
``X-Request-Id`` (or one the load balancer made) reaches the replica and comes
back in the response."""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lb_helpers import FakeController, LBProcess, Upstream, request, wait_for

from steadyserve.lb.access_log import _client

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
MADE = re.compile(r"^[0-9a-f]{12}-[0-9a-f]+$")


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LBProcess, Upstream, Path]]:
    home = tmp_path_factory.mktemp("home")
    log = home / "access.log"
    with Upstream("up") as up, FakeController(home) as ctl:
        # 127.0.0.0/8 (the test's own address) and 10.0.0.0/8 are proxies in front.
        trusted = {"trusted_proxies": ["127.0.0.0/8", "10.0.0.0/8"]}
        key = ctl.set_table([(1, up.port)], extra={"access_log": True, "load_balancer": trusted})
        with LBProcess(home, "--access-log", str(log)) as proc:
            wait_for(lambda: key in ctl.polls, what="table acknowledged")
            yield proc, up, log


def _line(log: Path, rid: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        text = log.read_text() if log.exists() else ""
        found[:] = [e for e in map(json.loads, text.splitlines()) if e["request_id"] == rid]
        return bool(found)

    wait_for(seen, timeout=10, what=f"the log line of {rid}")
    return found[0]


def test_a_valid_client_id_is_kept_end_to_end(lb: tuple[LBProcess, Upstream, Path]) -> None:
    proc, up, log = lb
    headers = {"X-Request-Id": "trace-7:a.b_c", "User-Agent": 'probe/1.0 ("q")'}
    status, got, _ = request(proc.port, "GET", "/echo?x=1", headers=headers)
    assert status == 200 and got["x-request-id"] == "trace-7:a.b_c"
    assert up.requests[-1]["headers"]["x-request-id"] == "trace-7:a.b_c"
    entry = _line(log, "trace-7:a.b_c")
    assert entry["user_agent"] == 'probe/1.0 ("q")' and entry["client"] == "127.0.0.1"
    assert TS.match(entry["ts"]), entry
    at = dt.datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()
    assert abs(at - entry["time"]) < 0.002  # the same moment, to the millisecond
    assert entry["path"] == "/echo?x=1" and entry["status"] == 200


@pytest.mark.parametrize("sent", [None, "has space", "x" * 129, "semi;colon"])
def test_a_missing_or_unsafe_id_is_replaced(
    lb: tuple[LBProcess, Upstream, Path], sent: str | None
) -> None:
    proc, up, log = lb
    headers = {} if sent is None else {"X-Request-Id": sent}
    status, got, _ = request(proc.port, "GET", "/echo", headers=headers)
    rid = got["x-request-id"]
    assert status == 200 and MADE.match(rid), got
    assert up.requests[-1]["headers"]["x-request-id"] == rid  # one header, ours
    assert _line(log, rid)["user_agent"] is None


def test_rebuilt_responses_carry_the_id_too(lb: tuple[LBProcess, Upstream, Path]) -> None:
    """HTTP/1.0 clients get a rebuilt head (no passthrough): the id is added there."""
    proc, _, log = lb
    with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as s:
        s.sendall(b"GET /chunked HTTP/1.0\r\nX-Request-Id: old-client\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    assert head.count(b"\r\nx-request-id: old-client") == 1, head
    assert _line(log, "old-client")["status"] == 200


def test_the_client_behind_trusted_proxies(lb: tuple[LBProcess, Upstream, Path]) -> None:
    proc, _, log = lb
    headers = {"X-Request-Id": "via-proxies", "X-Forwarded-For": "203.0.113.7, 10.1.2.3"}
    request(proc.port, "GET", "/echo", headers=headers)
    assert _line(log, "via-proxies")["client"] == "203.0.113.7"


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored() -> None:
    head = b"GET / HTTP/1.1\r\nx-forwarded-for: 1.2.3.4, 192.0.2.9\r\n\r\n"
    cache: dict[Any, Any] = {}
    assert _client(b"192.0.2.9", head, head, ("10.0.0.0/8",), cache) == b"192.0.2.9"
    assert _client(b"10.0.0.1", head, head, ("10.0.0.0/8",), cache) == b"192.0.2.9"
    trusted = ("10.0.0.0/8", "192.0.2.0/24")
    assert _client(b"10.0.0.1", head, head, trusted, cache) == b"1.2.3.4"


def test_a_request_sent_again_says_how_often_and_its_502_names_the_replica(
    lb: tuple[LBProcess, Upstream, Path],
) -> None:
    """A GET on a pooled connection that the replica resets goes again once on a
    fresh connection (lb/retry.py); reset again, and with no other replica, it is
    the client's 502, logged against the replica with the reason."""
    proc, _, log = lb
    assert request(proc.port, "GET", "/echo", headers={"X-Request-Id": "pool-it"})[0] == 200
    status, _, _ = request(proc.port, "GET", "/die", headers={"X-Request-Id": "die-twice"})
    assert status == 502
    entry = _line(log, "die-twice")
    assert (entry["status"], entry["replica"], entry["version"]) == (502, 1, 1)
    assert (entry["reason"], entry["retries"]) == ("replica_failed", 1)
    assert "retries" not in _line(log, "pool-it")
