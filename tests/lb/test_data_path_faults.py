"""The data path under replicas that close, reset, stall or talk nonsense.

Each case runs real clients through a real load balancer process in front of
replicas from bench/fault_harness.py, and holds the outcome to the harness's
rule (``may_fail``): a failure is allowed only for a request the fault may cost
(the replica processed it and then broke, or a request that is not idempotent
that it may have read); every other request gets its own answer, and none that
is not idempotent is processed twice. Each case is bounded to a few seconds;
bench/lb_faults.py runs the same cases for thousands of requests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _lb_helpers import LBProcess

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from fault_harness import (  # noqa: E402
    REQUEST_FAULTS,
    FaultReplica,
    Load,
    Verdict,
    judge,
    run_load,
)

DURATION = 2.0


def _run(
    tmp_path: Path, fault: str, replicas: list[FaultReplica], load: Load, *lb_args: str
) -> Verdict:
    routes = ",".join(r.address for r in replicas)
    try:
        with LBProcess(tmp_path, "--static-routes", routes, *lb_args) as lb:
            results = run_load(lb.port, load)
        return judge(fault, results, replicas)
    finally:
        for r in replicas:
            r.close()


@pytest.mark.parametrize(
    ("idle_timeout", "keep_alive", "workers"),
    [(0.05, True, 1), (0.1, True, 1), (0.1, False, 1), (0.1, True, 2)],
)
def test_replicas_closing_idle_connections_cost_no_request(
    tmp_path: Path, idle_timeout: float, keep_alive: bool, workers: int
) -> None:
    """The keep-alive race: two replicas close a connection idle for their timeout
    (as uvicorn does) while the clients' bursts come every 0.7-1.3 timeouts."""
    replicas = [
        FaultReplica(f"r{i}", "idle_close", idle_timeout=idle_timeout, seed=i) for i in range(2)
    ]
    load = Load(
        clients=6,
        keep_alive=keep_alive,
        gap=(0.7 * idle_timeout, 1.3 * idle_timeout),
        duration=DURATION,
    )
    verdict = _run(tmp_path, "idle_close", replicas, load, "--workers", str(workers))
    assert sum(r.idle_closes for r in replicas) > 2, "the replicas never closed an idle one"
    assert verdict.requests > 50
    assert verdict.passed, verdict


def test_replicas_closing_idle_connections_at_random_moments(tmp_path: Path) -> None:
    replicas = [
        FaultReplica(f"r{i}", "random_idle_close", idle_timeout=0.1, seed=i) for i in range(2)
    ]
    load = Load(clients=6, gap=(0.02, 0.08), duration=DURATION)
    verdict = _run(tmp_path, "random_idle_close", replicas, load)
    assert verdict.requests > 50
    assert verdict.passed, verdict


@pytest.mark.parametrize("fault", REQUEST_FAULTS)
def test_a_replica_breaking_requests_costs_only_what_it_may(tmp_path: Path, fault: str) -> None:
    """One replica of two breaks a third of its requests in one way: the requests
    it broke fail only where ``may_fail`` says (it processed them, or a method
    that is not idempotent it may have read); the others, retried or not, get
    their own answer."""
    replicas = [FaultReplica("bad", fault, rate=0.33, seed=7), FaultReplica("good")]
    load = Load(clients=4, gap=(0.0, 0.02), duration=DURATION)
    verdict = _run(tmp_path, fault, replicas, load, "--request-timeout", "0.3")
    assert replicas[0].broken, f"{fault} never happened"
    assert verdict.requests > 50
    assert verdict.passed, verdict
