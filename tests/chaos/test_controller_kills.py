"""Chaos: SIGKILL the controller at random points of rolling, blue-green and
in-place updates, under load. Seeded and bounded; prints its summary.

After each kill any ``steady`` command restarts the controller, which must
re-adopt what runs, finish or roll back the update in flight, and converge to
exactly one version at full strength with no orphan process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from tests.e2e.test_updates import port_of, spec_text, write
from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady, processes_of_home

SEED = int(os.environ.get("STEADY_CHAOS_SEED", "20261129"))
ROUNDS = int(os.environ.get("STEADY_CHAOS_ROUNDS", "2"))
TARGET = 2


def converged(svc: dict[str, Any]) -> bool:
    update = svc.get("update") or {}
    replicas = svc["replicas"]
    live = [r for r in replicas if not r["status"].startswith("FAILED")]
    return (
        update.get("status") != "IN_PROGRESS"
        and len(live) == TARGET
        and all(r["status"] == "READY" and r["version"] == svc["version"] for r in live)
    )


def test_controller_killed_during_updates(steady: Steady, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    config = "{message: c0}"
    steady.run("up", str(write(tmp_path, spec_text(user_config=config), "v0.yaml")), "--wait")
    port = port_of(steady.service("web"))
    client = LoadClient(port, max_seconds=300).start()
    faults, step = 0, 0
    outcomes: list[str] = []
    for _ in range(ROUNDS):
        for kind in ("rolling", "blue_green", "in_place"):
            step += 1
            if kind == "in_place":
                config = f"{{message: c{step}}}"
                text = spec_text(user_config=config, message=f"m{step - 1}")
            else:
                text = spec_text(user_config=config, message=f"m{step}", mode=kind)
            steady.run("update", "web", str(write(tmp_path, text, f"v{step}.yaml")))
            time.sleep(rng.uniform(0.0, 1.5))
            info = json.loads(steady.run("controller", "status", "--json").stdout)
            os.kill(info["pid"], signal.SIGKILL)
            faults += 1
            svc = steady.wait_for("web", converged, timeout=90, what=f"{kind} converged")
            outcomes.append(f"{kind}:{svc['update']['status']}")
            procs = processes_of_home(steady.home)
            # The controller, the load balancer and one process per replica.
            assert len(procs) == TARGET + 2, [p.cmdline() for p in procs]
    client.stop()
    report(
        f"\nchaos seed={SEED} rounds={ROUNDS} faults injected={faults} "
        f"requests sent={client.sent} failed={client.failed} outcomes={outcomes}"
    )
    report(f"   {client.summary()}")
    assert client.sent > 100
    assert client.failed == 0, client.summary()
