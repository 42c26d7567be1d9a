"""Several load-balancer workers on one endpoint (``service.load_balancer.workers``).

Fairness: with 4 workers and 2 replicas, each worker balances by the in-flight
counts all workers share, and each replica still gets half the requests (within
5 points). Each request holds its replica ~20 ms (a two-token stream), so the
split measures the shared counts, not which replica process a busy machine
happened to schedule first (instant answers skewed 57/43 on a loaded CI box). Draining: a
rolling update under load fails nothing, which needs every worker to have
acknowledged the table without an old replica before that replica stops. A
changed worker count replaces the load balancer without a failed request.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import threading
from collections import Counter
from pathlib import Path

import psutil

from tests.e2e.test_updates import finish, port_of, spec_text, write
from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady

CLIENTS = 8
REQUESTS_PER_CLIENT = 100
NEW_CONNECTION_EVERY = 5  # so the kernel spreads connections over the workers
SLOW_PATH = "/stream?n=2&interval=0.02"  # the example server's SSE stream: ~20 ms per answer
ANSWERED_BY = re.compile(rb"replica-(\w+)")


def workers_spec(workers: int, message: str = "v1") -> str:
    return spec_text(message=message, extra=f"load_balancer:\n    workers: {workers}")


def lb_workers(steady: Steady, name: str = "web") -> list[psutil.Process]:
    pid = steady.service(name)["load_balancer_pid"]
    return [c for c in psutil.Process(pid).children() if "steadyserve.lb" in c.cmdline()]


def hammer(port: int) -> tuple[Counter[str], int]:
    """CLIENTS threads of GETs; which replica answered each, and how many failed."""
    seen: Counter[str] = Counter()
    failed = 0
    lock = threading.Lock()

    def client() -> None:
        nonlocal failed
        conn: http.client.HTTPConnection | None = None
        for i in range(REQUESTS_PER_CLIENT):
            if conn is None or i % NEW_CONNECTION_EVERY == 0:
                if conn is not None:
                    conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", SLOW_PATH)
                resp = conn.getresponse()
                body = resp.read()
                ok = resp.status == 200 and ANSWERED_BY.search(body) is not None
            except (OSError, http.client.HTTPException):
                ok, body = False, b""
                conn.close()
                conn = None
            with lock:
                if ok:
                    match = ANSWERED_BY.search(body)
                    assert match is not None
                    seen[match.group(1).decode()] += 1
                else:
                    failed += 1
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return seen, failed


def test_four_workers_share_two_replicas_fairly(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(write(tmp_path, workers_spec(4), "v1.yaml")), "--wait", "--timeout", "60")
    svc = steady.service("web")
    assert len(lb_workers(steady)) == 4
    seen, failed = hammer(port_of(svc))
    total = sum(seen.values())
    shares = {rid: round(n / total, 3) for rid, n in seen.items()}
    report(f"4 LB workers, 2 replicas: {total} answered, {failed} failed, shares {shares}")
    assert failed == 0
    assert total == CLIENTS * REQUESTS_PER_CLIENT
    assert len(shares) == 2 and all(0.45 <= s <= 0.55 for s in shares.values()), shares


def test_rolling_update_with_four_workers_drops_nothing(steady: Steady, tmp_path: Path) -> None:
    steady.run("up", str(write(tmp_path, workers_spec(4), "v1.yaml")), "--wait", "--timeout", "60")
    clients = [LoadClient(port_of(steady.service("web")), max_seconds=90).start() for _ in range(4)]
    v2 = write(tmp_path, workers_spec(4, message="v2"), "v2.yaml")
    steady.run("update", "web", str(v2), "--wait", "--timeout", "60")
    for i, client in enumerate(clients):
        finish(client, f"rolling update, 4 LB workers, client {i}")
    events = steady.run("status", "web", "--events").stdout
    assert "LB_RESTARTING" not in events


def test_changing_the_worker_count_replaces_the_lb_without_failures(
    steady: Steady, tmp_path: Path
) -> None:
    steady.run("up", str(write(tmp_path, workers_spec(2), "v1.yaml")), "--wait", "--timeout", "60")
    old_pid = steady.service("web")["load_balancer_pid"]
    client = LoadClient(port_of(steady.service("web")), max_seconds=90).start()
    out = steady.run("update", "web", str(write(tmp_path, workers_spec(3), "v2.yaml")))
    assert "in place" in out.stdout
    steady.wait_for(
        "web",
        lambda s: s["load_balancer_pid"] not in (None, old_pid),
        what="a new load balancer",
    )
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(old_pid).wait(timeout=30)  # the old one drained and exited
    finish(client, "LB workers 2 -> 3")
    assert len(lb_workers(steady)) == 3
