"""A shadow step through a real load balancer: clients get the stable answer only,
exactly the step's share is mirrored (idempotent methods, never a pin), and the
comparison's counts reach the controller's report."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from _lb_helpers import FakeController, LBProcess, request, wait_for

from steadyserve.wire.mirror import Mirror


class Replica:
    """A JSON service of one version; ``drop_every``: leave out ``total`` in every
    Nth answer; ``stamp``: add the time of the answer (noise)."""

    def __init__(self, version: int, drop_every: int = 0, stamp: bool = False) -> None:
        self.version = version
        self.seen: list[tuple[str, str, bool]] = []  # method, path, mirrored copy
        count = itertools.count(1)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                shadow = self.headers.get("X-Steady-Shadow") == "1"
                outer.seen.append((self.command, self.path, shadow))
                n = next(count)
                body: dict[str, Any] = {"path": self.path, "items": [{"sku": "a", "n": 1}]}
                if not (drop_every and n % drop_every == 0):
                    body["total"] = 12.5
                if stamp:
                    body["at"] = time.time_ns()
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Version", str(outer.version))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def copies(self) -> int:
        return sum(1 for _, _, shadow in self.seen if shadow)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("home")
    stable, candidate = Replica(1, stamp=True), Replica(2, drop_every=4, stamp=True)
    with FakeController(home) as ctl, LBProcess(home, "--report-interval", "0.1") as lb:
        try:
            yield {"ctl": ctl, "lb": lb, "stable": stable, "candidate": candidate}
        finally:
            stable.close()
            candidate.close()


def publish(world: dict[str, Any], mirror: Mirror | None) -> None:
    ctl: FakeController = world["ctl"]
    ctl.set_table(
        [(1, world["stable"].port), (2, world["candidate"].port)],
        versions={1: 1, 2: 2},
        extra={
            "weights": {"1": 100, "2": 0},
            "mirror": None if mirror is None else mirror.to_json(),
        },
    )
    wait_for(lambda: any(r.get("table", "").endswith(str(ctl.version)) for r in ctl.reports[-3:]))


def shadow_report(ctl: FakeController, version: int = 2) -> dict[str, Any]:
    for report in reversed(ctl.reports):
        shadow = (report.get("metrics") or {}).get("shadow")
        if shadow is not None:
            return dict(shadow.get(str(version), {}))
    return {}


def test_clients_get_the_stable_answer_and_half_are_compared(world: dict[str, Any]) -> None:
    ctl, lb = world["ctl"], world["lb"]
    publish(world, Mirror(2, 50, noise_share=0.5))
    stable, candidate = world["stable"], world["candidate"]
    before_stable, before_copies = len(stable.seen), candidate.copies()
    for i in range(40):
        status, headers, data = request(lb.port, "GET", f"/orders/{i}?token=hunter2")
        assert status == 200
        assert headers["x-version"] == "1", "a client got an answer of the new version"
        assert json.loads(data)["total"] == 12.5
        assert "x-steady-shadow" not in {k.lower() for k in headers}
    wait_for(lambda: shadow_report(ctl).get("compared") == 20, 10, "20 copies compared")
    counts = shadow_report(ctl)
    assert counts["mirrored"] == 20 and counts["dropped"] == 0
    assert candidate.copies() - before_copies == 20
    assert all(shadow for _, _, shadow in candidate.seen), "only copies reached version 2"
    # Every 4th answer of version 2 lacks "total"; the time stamp differs everywhere.
    signatures = counts["signatures"]
    assert sum(signatures.values()) == 20
    assert sum(n for sig, n in signatures.items() if "removed $.total" in sig) == 5
    assert counts["noise_pairs"] == 10 and counts["noise"] == {"changed $.at": 10}
    assert "hunter2" not in json.dumps(counts["examples"])
    assert counts["examples"]["removed $.total"].startswith("GET /orders/")
    assert len(stable.seen) - before_stable == 40 + 10  # the clients' and the noise pairs'


def test_other_methods_and_pins_are_not_mirrored(world: dict[str, Any]) -> None:
    ctl, lb, candidate = world["ctl"], world["lb"], world["candidate"]
    publish(world, Mirror(2, 100, noise_share=0.0))
    start = shadow_report(ctl).get("mirrored", 0)
    copies = candidate.copies()
    for _ in range(6):
        status, _, _ = request(lb.port, "POST", "/orders", body=b'{"x": 1}')
        assert status == 200
    status, headers, _data = request(lb.port, "GET", "/pinned", headers={"X-Steady-Version": "2"})
    assert status == 200 and headers["x-version"] == "2"
    status, _, _ = request(lb.port, "HEAD", "/h")
    assert status == 200
    # A copy is decided as its request is answered: the first report that counts the
    # HEAD's copy has every decision on the POSTs and the pin before it.
    wait_for(lambda: shadow_report(ctl).get("mirrored", 0) > start, 10, "the HEAD copy")
    assert shadow_report(ctl)["mirrored"] == start + 1
    wait_for(lambda: candidate.copies() == copies + 1, 10, "the copy arrives")
    assert candidate.seen[-1][0] == "HEAD"


def test_no_mirror_in_the_table_mirrors_nothing(world: dict[str, Any]) -> None:
    ctl, lb, candidate = world["ctl"], world["lb"], world["candidate"]
    publish(world, None)
    copies, mirrored = candidate.copies(), shadow_report(ctl).get("mirrored", 0)
    for _ in range(10):
        assert request(lb.port, "GET", "/x")[0] == 200
    seen = len(ctl.reports)
    wait_for(lambda: len(ctl.reports) > seen + 1, 10, "a report after the requests")
    assert shadow_report(ctl).get("mirrored", 0) == mirrored
    assert candidate.copies() == copies
