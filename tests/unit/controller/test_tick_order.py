"""The reconcile tick's order is written once (``ServiceRuntime.tick_steps``), and
docs/design.md's "The reconcile tick" table says the same; every step of a tick runs,
in that order, once per tick."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.fake_controller import World

ROOT = Path(__file__).resolve().parents[3]
PHASES = ("observe", "decide", "plan", "apply")


def _documented() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("### The reconcile tick") :]
    section = section[: section.index("\n### ")]
    return re.findall(r"^\| (\w+) \| `(\w+)` \|", section, flags=re.M)


def test_the_documented_tick_is_the_tick_the_runtime_runs(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": {"replicas": 1}})
    try:
        steps = [(phase, step.__name__) for phase, step in world.runtime.tick_steps()]
    finally:
        world.store.close()
    assert steps == _documented()


def test_the_phases_come_in_order_observe_decide_plan_apply(tmp_path: Path) -> None:
    world = World(tmp_path, {"service": {"replicas": 1}})
    try:
        phases = [phase for phase, _ in world.runtime.tick_steps()]
    finally:
        world.store.close()
    assert phases == sorted(phases, key=PHASES.index)
    assert phases.count("plan") == 1  # one plan a tick, and nothing after it but applying
