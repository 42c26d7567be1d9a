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

from fault_harness import FaultReplica, Load, judge, run_load  # noqa: E402


def _report(fault: str, verdict: object) -> str:
    return f"{fault}: {verdict}"


@pytest.mark.parametrize("idle_timeout", [0.05, 0.1])
def test_replicas_closing_idle_connections_cost_no_request(
    tmp_path: Path, idle_timeout: float
) -> None:
    """The keep-alive race: two replicas close a connection idle for their timeout
    while the clients' bursts come every 0.7-1.3 timeouts."""
    replicas = [
        FaultReplica(f"r{i}", "idle_close", idle_timeout=idle_timeout, seed=i) for i in range(2)
    ]
    try:
        with LBProcess(tmp_path, "--static-routes", ",".join(r.address for r in replicas)) as lb:
            load = Load(
                clients=6,
                gap=(0.7 * idle_timeout, 1.3 * idle_timeout),
                duration=3.0,
            )
            results = run_load(lb.port, load)
            verdict = judge("idle_close", results, replicas)
        assert sum(r.idle_closes for r in replicas) > 10, "the replicas never closed an idle one"
        assert verdict.requests > 200
        assert verdict.passed, [s for s in verdict.unexpected[:5]]
    finally:
        for r in replicas:
            r.close()
